"""The status cache's shard files: ``projections/status.d/NN.json``.

Each of the 256 shards (:class:`StatusShard`) holds the cached entries of the
goals whose id hashes to it, so a refresh rewrites only the shards of the goals
that changed. A goal that never ran is stored as the fingerprint of its
``goal.json`` and ``turns/`` and the time it was projected (:class:`UnrunGoals`): the cache rebuilds its view
on load. A shard that cannot be read (damaged, of another schema version) is
not an error: the caller rebuilds the cache from the goals' files.
"""

from __future__ import annotations

import contextlib
import shutil
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Final

from loopx.errors import LoopxError
from loopx.log import get_logger
from loopx.root import Layout
from loopx.status.fingerprint import FINGERPRINT_NAMES
from loopx.status.refresh import CachedGoal, StatusShard, UnrunGoals
from loopx.status.sources import NO_COUNTS
from loopx.status.view import json_bytes
from loopx.storage.files import atomic_write_bytes, ensure_dir, parse_model, read_bytes

SHARDS: Final = 256
SHARD_DIR: Final = "status.d"
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


@dataclass(slots=True)
class ShardContents:
    """What the shards hold: full entries, and the goals that never ran (rebuilt by the cache)."""

    goals: dict[str, CachedGoal] = field(default_factory=dict)
    # goals that never ran: their whole fingerprint and when they were projected
    unrun: dict[str, tuple[list[int], datetime]] = field(default_factory=dict)


def read_shards(layout: Layout) -> ShardContents | None:
    """Every cached goal of every shard; None when a shard cannot be read (rebuild then)."""
    out = ShardContents()
    for shard in range(SHARDS):
        path = shard_file(layout, shard)
        try:
            read = parse_model(path, StatusShard, read_bytes(path))
        except FileNotFoundError:
            continue
        except (LoopxError, OSError) as e:
            log.warning("status_shard_unreadable", path=str(path), error=str(e))
            return None  # a lost shard means lost goals
        out.goals.update(read.goals)
        for group in read.unrun:
            at = group.projected_at
            out.unrun.update((g, (_unkept(fp), at)) for g, fp in group.goals.items())
    return out


def write_shard(
    layout: Layout,
    shard: int,
    members: Mapping[str, CachedGoal],
    unrun: Mapping[str, tuple[list[int], datetime]],
) -> None:
    """Replace one shard with ``members`` and ``unrun``, or delete it when there are none.

    ``unrun`` holds the goals for which :func:`never_ran` holds: their whole
    fingerprint and when their view was projected.
    """
    path = shard_file(layout, shard)
    if members or unrun:
        groups: dict[datetime, dict[str, list[int]]] = {}
        for goal_id, (fp, at) in unrun.items():
            groups.setdefault(at, {})[goal_id] = _kept(fp)
        record = StatusShard(
            goals=dict(members),
            unrun=[UnrunGoals(projected_at=at, goals=g) for at, g in groups.items()],
        )
        atomic_write_bytes(path, json_bytes(record, indent=None), durable=False)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def ensure_shard_dir(layout: Layout) -> None:
    """Create ``projections/status.d/`` if it is missing."""
    ensure_dir(shard_dir(layout))


def remove_shards(layout: Layout) -> None:
    """Delete every shard (``--clear-cache``)."""
    with contextlib.suppress(FileNotFoundError):
        shutil.rmtree(shard_dir(layout))
