"""A warm ``loopx quota should-run``: a stored decision, checked with the standard library only.

``projections/quota.d/<id>.snapshot`` is written by
:func:`loopx.quota.snapshot.store_snapshot` each time the validated path
(``Root.quota.should_run``) decides. It holds the decision as its ``--json``
document, the exit code, and everything the answer depends on:

* the stat fingerprint (inode, size, mtime_ns) of every file the decision read:
  ``registry.json`` (migration, a newer root), the goal's ``goal.json`` (status,
  policy), ``state.json`` (gates, ``next_eligible_at``), ``lease.json``, and the
  spend ledger ``quota.jsonl`` with its aggregate ``quota.agg.json``;
* ``valid_until``: the earliest instant the same files may decide otherwise
  (:func:`loopx.quota.decision.holds_until`: a lease running out,
  ``next_eligible_at`` passing, the oldest spend of the window leaving it);
* the program's version (a new release may word a decision differently).

:func:`print_snapshot` prints the decision again while all of them hold, with
the parts that move with the clock rendered for now by :func:`render`:
``decided_at``, ``window_start``, the host's headroom (measured as the
validated path measures it, :func:`loopx.quota.host.host_numbers`) and a
waiting message's ``(in N s)``. The writer stores a snapshot only when
:func:`render` reproduces the bytes the validated path printed, so the two
paths print the same bytes. A goal with a host guard (``min_free_memory_mb``,
``max_load_per_cpu``) gets no snapshot: its answer moves with the host.

Anything missing, damaged, foreign or stale means "decide the validated way",
never an error: it is a cache. This module imports only the standard library
(and ``loopx`` modules that do), so a warm ``should-run`` starts without
pydantic, psutil or structlog (issue 14).
"""

from __future__ import annotations

import json
import math
import os
import time

from loopx import exitcodes
from loopx._version import VERSION
from loopx.errors import LoopxError
from loopx.ids import validate_goal_id
from loopx.quota.host import HostNumbers, host_numbers
from loopx.quota.phrases import in_phrase, should_run_line

TYPE_CHECKING = False  # not `typing`: this path must start within 2x of bare Python
if TYPE_CHECKING:
    from datetime import datetime
    from pathlib import Path
    from typing import Any, BinaryIO, Final

    from loopx.root import Layout

SNAPSHOT_DIR: Final = "quota.d"
SCHEMA_VERSION: Final = 1
EXIT_CODES: Final = frozenset({exitcodes.OK, exitcodes.NOT_ALLOWED})
Fingerprint = list[int]  # [inode, size, mtime_ns]; [0, -1, 0] for an absent file
_ABSENT: Final = [0, -1, 0]
_MAX_SNAPSHOT: Final = 1024 * 1024
# json.dumps and pydantic spell a float alike between these (1e-05 vs 0.00001 outside).
_PLAIN_FLOATS: Final = (1e-4, 1e15)


def snapshot_file(layout: Layout, goal_id: str) -> Path:
    """``projections/quota.d/<id>.snapshot``."""
    return layout.projections_dir / SNAPSHOT_DIR / f"{validate_goal_id(goal_id)}.snapshot"


def input_files(layout: Layout, goal_id: str) -> list[Path]:
    """Every file a quota decision reads, in the snapshot's order (the aggregate last)."""
    return [
        layout.registry,
        layout.goal_file(goal_id),
        layout.state_file(goal_id),
        layout.lease_file(goal_id),
        layout.quota_file(goal_id),
        layout.quota_aggregate_file(goal_id),
    ]


def fingerprints(layout: Layout, goal_id: str) -> list[Fingerprint]:
    """``[inode, size, mtime_ns]`` of each of :func:`input_files` (``[0, -1, 0]`` when absent).

    The inode catches an atomic rewrite of the same size within one mtime tick.
    """
    out: list[Fingerprint] = []
    for path in input_files(layout, goal_id):
        try:
            st = os.stat(path, follow_symlinks=False)
        except (FileNotFoundError, NotADirectoryError):
            out.append(list(_ABSENT))
        else:
            out.append([st.st_ino, st.st_size, st.st_mtime_ns])
    return out


def iso_z(at: datetime) -> str:
    """A UTC instant as pydantic writes it in a JSON document (``...Z``)."""
    return at.isoformat().replace("+00:00", "Z")


def _plain(value: float) -> bool:
    low, high = _PLAIN_FLOATS
    return math.isfinite(value) and (value == 0 or low <= abs(value) < high)


def render(
    snapshot: dict[str, Any], *, now: datetime, host: HostNumbers | None, as_json: bool
) -> bytes | None:
    """What the validated path prints for the stored decision at ``now``, or None if it cannot tell.

    ``host`` is needed only for ``as_json`` (the text line does not show it).
    """
    decision: dict[str, Any] = dict(snapshot["decision"])
    head = snapshot["message_head"]
    if head is not None:
        from datetime import datetime  # noqa: PLC0415 - an allowed answer's line needs none

        at = datetime.fromisoformat(decision["next_eligible_at"])
        decision["message"] = head + in_phrase(at, now)
    if not as_json:
        line = should_run_line(
            allowed=decision["allowed"], reason=decision["reason"], message=decision["message"]
        )
        return (line + "\n").encode()
    room = decision["headroom"]
    if host is None or not isinstance(room, dict):
        return None
    if not (_plain(host.available_memory_mb) and _plain(host.load_1m)):
        return None
    from datetime import timedelta  # noqa: PLC0415 - see above

    decision["window_start"] = iso_z(now - timedelta(hours=decision["window_hours"]))
    decision["decided_at"] = iso_z(now)
    decision["headroom"] = room | {
        "available_memory_mb": host.available_memory_mb,
        "load_1m": host.load_1m,
        "cpu_count": host.cpu_count,
        "measured_at": iso_z(now),
    }
    return (json.dumps(decision, indent=2, ensure_ascii=False) + "\n").encode()


def _render_at(
    snapshot: dict[str, Any], *, at: float, now: datetime | None, as_json: bool
) -> bytes | None:
    """:func:`render` at epoch ``at``; a fixed line (the usual "yes (ok)") needs no datetime."""
    if not as_json and snapshot["message_head"] is None:
        now = None  # render never reads it then
    elif now is None:
        from datetime import UTC, datetime  # noqa: PLC0415 - see above

        now = datetime.fromtimestamp(at, UTC)
    return render(
        snapshot,
        now=now,  # type: ignore[arg-type]  # None only where render does not read it
        host=host_numbers() if as_json else None,
        as_json=as_json,
    )


def _read(path: Path) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as f:
        return f.read(_MAX_SNAPSHOT)


def _holds(layout: Layout, goal_id: str, snapshot: dict[str, Any], *, now: float) -> bool:
    until = snapshot["valid_until"]
    return (
        snapshot["schema_version"] == SCHEMA_VERSION
        and snapshot["version"] == VERSION
        and snapshot["goal_id"] == goal_id
        and snapshot["registry"] == str(layout.registry)
        and snapshot["exit_code"] in EXIT_CODES
        and snapshot["decided_at"] <= now  # a clock set back could bring old spend back
        and (until is None or now < until)
        and snapshot["files"] == fingerprints(layout, goal_id)
    )


def _write(out: int | BinaryIO, data: bytes) -> None:
    if isinstance(out, int):
        view = memoryview(data)
        while view:
            view = view[os.write(out, view) :]  # a short write is continued
    else:
        out.write(data)


def print_snapshot(
    layout: Layout,
    goal_id: str,
    *,
    as_json: bool,
    out: int | BinaryIO,
    now: datetime | None = None,
) -> int | None:
    """Print the stored decision of ``goal_id`` to ``out`` if it still holds; its exit code.

    ``now`` is read from the clock unless given.

    Returns:
        None, having written nothing, when there is no snapshot or it no longer
        holds; a missing, damaged or foreign file is never an error: it is a cache.
    """
    try:
        path = snapshot_file(layout, goal_id)
        if os.path.islink(path.parent):  # O_NOFOLLOW guards only the file itself
            return None
        snapshot = json.loads(_read(path))
        at = time.time() if now is None else now.timestamp()
        if not isinstance(snapshot, dict) or not _holds(layout, goal_id, snapshot, now=at):
            return None
        data = _render_at(snapshot, at=at, now=now, as_json=as_json)
        code = snapshot["exit_code"]
    except (OSError, ValueError, KeyError, TypeError, AttributeError, LoopxError):
        return None
    if data is None:
        return None
    _write(out, data)
    return int(code)


__all__ = [
    "SNAPSHOT_DIR",
    "fingerprints",
    "input_files",
    "iso_z",
    "print_snapshot",
    "render",
    "snapshot_file",
]
