"""The status cache's shard files: ``projections/status.d/NN.json``.

Each of the 256 shards (:class:`StatusShard`) holds the cached entries of the
goals whose id hashes to it, so a refresh rewrites only the shards of the goals
that changed. A goal that never ran is stored as the fingerprint of its
``goal.json`` and ``turns/`` and the time it was projected (:class:`UnrunGoals`): the cache rebuilds its view
on load. A shard that cannot be read (damaged, of another schema version) is
not an error: the caller rebuilds the cache from the goals' files.

A write of more than half of the shards (a cold refresh) puts them all in
``status.d/pack.jsonl`` (:func:`write_pack`): a :class:`ShardPack` line, then
one line per shard; creating 256 files was most of such a write. A shard file
present beside the pack holds its shard instead of the pack's line, so later
refreshes still rewrite one shard file each; the pack goes when every line of
it is shadowed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import zlib
from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Final

from loopx.errors import CorruptFileError, LoopxError
from loopx.faults import fault_point
from loopx.log import get_logger
from loopx.root import Layout
from loopx.status.fingerprint import FINGERPRINT_NAMES
from loopx.status.refresh import CachedGoal, ShardPack, StatusShard, UnrunGoals
from loopx.status.sources import NO_COUNTS
from loopx.status.view import json_bytes
from loopx.storage.files import atomic_write_bytes, ensure_dir, parse_model, read_bytes

SHARDS: Final = 256
SHARD_DIR: Final = "status.d"
PACK_NAME: Final = "pack.jsonl"
_ALL: Final = frozenset(range(SHARDS))
# A goal that never ran has its goal.json and, from `goal add`, an empty turns/: only
# their fingerprints are stored for it, the others being those of missing files.
_KEPT: Final = ("goal.json", "turns")
_RUN_FILES: Final = frozenset(FINGERPRINT_NAMES).difference(_KEPT)
# _kept and _unkept rely on goal.json coming first in a fingerprint and turns/ last.
_BETWEEN: Final = (0, 0, -1) * (len(FINGERPRINT_NAMES) - 2)  # the missing files' numbers
if (FINGERPRINT_NAMES[0], FINGERPRINT_NAMES[-1]) != _KEPT:  # pragma: no cover - a layout change
    msg = f"status shards: fingerprint order changed ({FINGERPRINT_NAMES}); fix _kept/_unkept"
    raise ImportError(msg)

log = get_logger(__name__)


def never_ran(absent: frozenset[str], cached: CachedGoal) -> bool:
    """Whether ``cached`` is the view of a goal that never ran, rebuilt from its policy alone.

    ``absent``: the files its fingerprint records as missing (:func:`absent_files`).
    Such an entry is stored as its fingerprint's kept numbers and the time it
    was projected; the cache projects it again from the goal's policy on load.
    """
    view = cached.view
    history = cached.history
    return (
        absent >= _RUN_FILES
        and not view.warnings
        and not view.quarantined
        and view.probe is None
        and cached.epoch == 0
        and (history is NO_COUNTS or history == NO_COUNTS)  # `is`: most, and cheaper
    )


def _kept(fp: Sequence[int]) -> list[int]:
    """The fingerprint of a goal that never ran, as stored: goal.json's and turns/'s numbers."""
    return [*fp[:3], *fp[-3:]]


def _unkept(kept: Sequence[int]) -> list[int]:
    """The whole fingerprint back from :func:`_kept`'s numbers."""
    return [*kept[:3], *_BETWEEN, *kept[3:6]]


def shard_of(goal_id: str) -> int:
    """The shard a goal's cached view lives in."""
    return zlib.crc32(goal_id.encode()) % SHARDS


def shard_dir(layout: Layout) -> Path:
    """``projections/status.d/``."""
    return layout.projections_dir / SHARD_DIR


def shard_file(layout: Layout, shard: int) -> Path:
    """``projections/status.d/NN.json``."""
    return shard_dir(layout) / f"{shard:02x}.json"


def pack_file(layout: Layout) -> Path:
    """``projections/status.d/pack.jsonl``: shards written together (:func:`write_pack`)."""
    return shard_dir(layout) / PACK_NAME


@dataclass(slots=True)
class ShardContents:
    """What the shards hold: full entries, and the goals that never ran (rebuilt by the cache)."""

    goals: dict[str, CachedGoal] = field(default_factory=dict)
    # goals that never ran: their whole fingerprint and when they were projected
    unrun: dict[str, tuple[list[int], datetime]] = field(default_factory=dict)
    files: set[int] = field(default_factory=set)  # shards in a file of their own
    packed: set[int] = field(default_factory=set)  # shards with a line in the pack


def shard_number(name: str) -> int | None:
    """The shard a file of ``status.d/`` holds (``NN.json``); None for the pack or a temporary."""
    if len(name) != len("00.json") or not name.endswith(".json"):
        return None
    try:
        shard = int(name[:2], 16)
    except ValueError:
        return None
    return shard if name == f"{shard:02x}.json" else None


def read_shards(layout: Layout) -> ShardContents | None:
    """Every cached goal of every shard; None when a shard cannot be read (rebuild then).

    A shard file holds its shard; the pack's line for a shard without one
    holds it otherwise (:func:`write_pack`).
    """
    out = ShardContents()
    try:
        names = os.listdir(shard_dir(layout))
    except FileNotFoundError:
        return out
    out.files = {n for n in map(shard_number, names) if n is not None}
    try:
        lines = read_pack(layout) if PACK_NAME in names else []
        for shard, line in lines:
            out.packed.add(shard)
            if shard not in out.files:
                _add(out, parse_pack_line(layout, shard, line))
        for shard in sorted(out.files):
            path = shard_file(layout, shard)
            try:
                _add(out, parse_model(path, StatusShard, read_bytes(path)))
            except FileNotFoundError:
                out.files.discard(shard)
    except FileNotFoundError:  # the pack, gone since the listing: only a writer without the lock
        return None
    except (LoopxError, OSError) as e:
        log.warning("status_shard_unreadable", path=str(shard_dir(layout)), error=str(e))
        return None  # a lost shard means lost goals
    return out


def _add(out: ShardContents, read: StatusShard) -> None:
    out.goals.update(read.goals)
    for group in read.unrun:
        at = group.projected_at
        out.unrun.update((g, (_unkept(fp), at)) for g, fp in group.goals.items())


def read_pack(layout: Layout) -> list[tuple[int, bytes]]:
    """The pack's lines, each with the shard it holds (not parsed: a shadowed one is not read).

    Raises:
        FileNotFoundError: there is no pack.
        CorruptFileError: the first line is not a :class:`ShardPack`, or does not match the lines.
    """
    path = pack_file(layout)
    lines = read_bytes(path).split(b"\n")
    head = parse_model(path, ShardPack, lines[0])
    body = lines[1:-1] if lines[-1] == b"" else lines[1:]
    shards = head.shards
    if len(body) != len(shards) or len(set(shards)) != len(shards) or not set(shards) <= _ALL:
        msg = f"{len(body)} lines for the shards {shards}"
        raise CorruptFileError(path, msg)
    return list(zip(shards, body, strict=True))


def parse_pack_line(layout: Layout, shard: int, line: bytes) -> StatusShard:
    """One line of the pack (:func:`read_pack`), validated.

    Raises:
        CorruptFileError: the line is not a :class:`StatusShard`; the message names the shard.
    """
    return parse_model(f"{pack_file(layout)} (shard {shard:02x})", StatusShard, line)


def _record(
    members: Mapping[str, CachedGoal], unrun: Mapping[str, tuple[list[int], datetime]]
) -> bytes:
    groups: dict[datetime, dict[str, list[int]]] = {}
    for goal_id, (fp, at) in unrun.items():
        groups.setdefault(at, {})[goal_id] = _kept(fp)
    record = StatusShard(
        goals=dict(members),
        unrun=[UnrunGoals(projected_at=at, goals=g) for at, g in groups.items()],
    )
    return json_bytes(record, indent=None)


def write_shard(
    layout: Layout,
    shard: int,
    members: Mapping[str, CachedGoal],
    unrun: Mapping[str, tuple[list[int], datetime]],
    *,
    shadow: bool = False,
) -> bool:
    """Replace one shard's file with ``members`` and ``unrun``, or delete it when there are none.

    ``unrun`` holds the goals for which :func:`never_ran` holds: their whole
    fingerprint and when their view was projected. ``shadow``: the pack has a
    line for this shard, so an empty shard is written, not deleted (the line
    would hold it again). Returns whether the file exists now.
    """
    path = shard_file(layout, shard)
    if members or unrun or shadow:
        atomic_write_bytes(path, _record(members, unrun), durable=False)
        return True
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    return False


def write_pack(
    layout: Layout,
    shards: Iterable[
        tuple[int, Mapping[str, CachedGoal], Mapping[str, tuple[list[int], datetime]]]
    ],
) -> set[int]:
    """Replace the pack with ``shards`` (number, members, unrun), then delete every shard file.

    Returns the shards given a line (those with goals). In this order a crash
    can leave a shard file older than the new pack, never a pack older than a
    shard file: the older file holds what the index on disk (written last) says.
    """
    numbers: list[int] = []
    lines: list[bytes] = []
    for shard, members, unrun in shards:
        if members or unrun:
            numbers.append(shard)
            lines.append(_record(members, unrun))
    head = json_bytes(ShardPack(shards=numbers), indent=None)
    atomic_write_bytes(pack_file(layout), b"\n".join([head, *lines, b""]), durable=False)
    fault_point("status:pack_written")
    _remove_shard_files(layout, keep=frozenset())
    return set(numbers)


def remove_others(layout: Layout, *, keep: set[int]) -> None:
    """Delete the pack and every shard file but those of ``keep`` (a cache rebuilt whole)."""
    remove_pack(layout)
    _remove_shard_files(layout, keep=keep)


def _remove_shard_files(layout: Layout, *, keep: AbstractSet[int]) -> None:
    directory = shard_dir(layout)
    for name in os.listdir(directory):
        shard = shard_number(name)
        if shard is not None and shard not in keep:
            with contextlib.suppress(FileNotFoundError):
                (directory / name).unlink()


def remove_pack(layout: Layout) -> None:
    """Delete the pack (none of its lines is read any more)."""
    with contextlib.suppress(FileNotFoundError):
        pack_file(layout).unlink()


def ensure_shard_dir(layout: Layout) -> None:
    """Create ``projections/status.d/`` if it is missing."""
    ensure_dir(shard_dir(layout))


def remove_shards(layout: Layout) -> None:
    """Delete every shard (``--clear-cache``)."""
    with contextlib.suppress(FileNotFoundError):
        shutil.rmtree(shard_dir(layout))
