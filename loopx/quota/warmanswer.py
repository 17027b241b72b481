"""The warm ``loopx quota should-run``: the last decision, replayed while its files hold.

Each decision the validated path makes on the real clock is stored as two
memos (:mod:`loopx.memo`, in this host's cache directory), its ``--json``
document and its line, by :func:`loopx.quota.snapshot.store_snapshot`, with
the fingerprints of every file it read (:func:`input_files`) and the instant
the same files may decide otherwise. The parts that move with the clock are
holes filled again at replay (:func:`filler`): ``decided_at`` and the
headroom's ``measured_at`` (``at``), ``window_start`` (``since:<hours>``), the
host's memory, load and CPUs as the validated path measures them
(:func:`loopx.quota.host.host_numbers`), and a waiting message's
``(in N s)`` (``in:<instant>``). Standard library only, so a warm
``should-run`` starts without pydantic, psutil or structlog.
"""

from __future__ import annotations

import json
import math
import os
import time

from loopx._version import VERSION
from loopx.ids import validate_goal_id
from loopx.memo import host_cache_dir, replay
from loopx.quota.host import HostNumbers, host_numbers
from loopx.quota.phrases import in_phrase

TYPE_CHECKING = False  # not `typing`: this path must start within 2x of bare Python
if TYPE_CHECKING:
    from collections.abc import Callable
    from datetime import datetime
    from typing import BinaryIO, Final

    from loopx.root import Layout

# json.dumps and pydantic spell a float alike between these (1e-05 vs 0.00001 outside).
_PLAIN_FLOATS: Final = (1e-4, 1e15)
_HOST_HOLES: Final = {"mem": 0, "load": 1, "cpus": 2}  # their place in HostNumbers


def memo_path(layout: Layout, goal_id: str, *, as_json: bool) -> str:
    """``<host cache dir>/quota-<id>.json`` (the ``--json`` answer) or ``.line``."""
    name = f"quota-{validate_goal_id(goal_id)}.{'json' if as_json else 'line'}"
    return os.path.join(host_cache_dir(layout.root), name)


def memo_key(layout: Layout) -> str:
    """What a decision depends on besides its files: the program's version and the registry."""
    return f"{VERSION}\0{layout.registry}"


def input_files(layout: Layout, goal_id: str) -> list[str]:
    """Every file a quota decision reads (the aggregate cache last)."""
    return [
        str(p)
        for p in (
            layout.registry,
            layout.goal_file(goal_id),
            layout.state_file(goal_id),
            layout.lease_file(goal_id),
            layout.quota_file(goal_id),
            layout.quota_aggregate_file(goal_id),
        )
    ]


def iso_z(at: datetime) -> str:
    """A UTC instant as pydantic writes it in a JSON document (``...Z``)."""
    return at.isoformat().replace("+00:00", "Z")


def _number(value: float) -> bytes | None:
    low, high = _PLAIN_FLOATS
    if not (math.isfinite(value) and (value == 0 or low <= abs(value) < high)):
        return None
    return json.dumps(value).encode()


def filler(now: float, host: HostNumbers | None = None) -> Callable[[str], bytes | None]:
    """What each hole of a stored decision holds at ``now`` (epoch seconds).

    ``host`` stands for the host's numbers (the store checks a decision with
    its own); measured on first need otherwise. Nothing is imported or
    measured for an answer without holes (the usual "yes (ok)").
    """
    measured: list[HostNumbers | None] = [host] if host is not None else []

    def numbers() -> HostNumbers | None:
        if not measured:
            measured.append(host_numbers())
        return measured[0]

    def fill(hole: str) -> bytes | None:
        name, _, arg = hole.partition(":")
        if name in _HOST_HOLES:
            room = numbers()
            if room is None:
                return None
            value = room[_HOST_HOLES[name]]
            return str(int(value)).encode() if name == "cpus" else _number(value)
        from datetime import UTC, datetime, timedelta  # noqa: PLC0415 - only for these holes

        at = datetime.fromtimestamp(now, UTC)
        if name == "at":
            return json.dumps(iso_z(at)).encode()
        if name == "since":
            return json.dumps(iso_z(at - timedelta(hours=float(arg)))).encode()
        return in_phrase(datetime.fromisoformat(arg), at).encode() if name == "in" else None

    return fill


def print_decision(
    layout: Layout, goal_id: str, *, as_json: bool, out: int | BinaryIO, now: float | None = None
) -> int | None:
    """Print the stored decision of ``goal_id`` to ``out`` if it holds; its exit code, or None."""
    at = time.time() if now is None else now
    path = memo_path(layout, goal_id, as_json=as_json)
    return replay(path, out, now=at, fill=filler(at), key=memo_key(layout))


__all__ = ["filler", "input_files", "iso_z", "memo_key", "memo_path", "print_decision"]
