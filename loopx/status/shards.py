"""The status cache's shard files: ``projections/status.d/NN.json``.

Each of the 256 shards (:class:`StatusShard`) holds the cached entries of the
goals whose id hashes to it, so a refresh rewrites only the shards of the goals
that changed. A shard that cannot be read (damaged, of another schema version)
is not an error: the caller rebuilds the cache from the goals' files.
"""

from __future__ import annotations

import contextlib
import shutil
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from loopx.errors import LoopxError
from loopx.log import get_logger
from loopx.root import Layout
from loopx.status.refresh import CachedGoal, StatusShard
from loopx.status.view import json_bytes
from loopx.storage.files import atomic_write_bytes, ensure_dir, parse_model, read_bytes

SHARDS: Final = 256
SHARD_DIR: Final = "status.d"

log = get_logger(__name__)


def shard_of(goal_id: str) -> int:
    """The shard a goal's cached view lives in."""
    return zlib.crc32(goal_id.encode()) % SHARDS


def shard_dir(layout: Layout) -> Path:
    """``projections/status.d/``."""
    return layout.projections_dir / SHARD_DIR


def shard_file(layout: Layout, shard: int) -> Path:
    """``projections/status.d/NN.json``."""
    return shard_dir(layout) / f"{shard:02x}.json"


def read_shards(layout: Layout) -> dict[str, CachedGoal] | None:
    """Every cached goal of every shard; None when a shard cannot be read (rebuild then)."""
    goals: dict[str, CachedGoal] = {}
    for shard in range(SHARDS):
        path = shard_file(layout, shard)
        try:
            goals.update(parse_model(path, StatusShard, read_bytes(path)).goals)
        except FileNotFoundError:
            continue
        except (LoopxError, OSError) as e:
            log.warning("status_shard_unreadable", path=str(path), error=str(e))
            return None  # a lost shard means lost goals
    return goals


def write_shard(layout: Layout, shard: int, members: Mapping[str, CachedGoal]) -> None:
    """Replace one shard with ``members``, or delete it when there are none."""
    path = shard_file(layout, shard)
    if members:
        data = json_bytes(StatusShard(goals=dict(members)), indent=None)
        atomic_write_bytes(path, data, durable=False)
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
