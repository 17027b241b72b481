"""The status cache's shards on an existing root, in-process: writing them and loading them.

Brings the cache up to date once, then times, ``--passes`` times each (the
lowest wall time is printed): rewriting all 256 shards (``StatusCache._write``,
which packs them into one file), the same shards as 256 new files (what a cold
refresh wrote before the pack: the reference, measured in the same run),
serialising them alone (the file writes skipped), and what a fresh process
does before it can project (load every shard, then the goal sync, which
rebuilds the views of goals that never ran). Also prints the shards' bytes.
Rewrites the root's shards with what they already hold.

    python benchmarks/status_shards.py ROOT [--passes 5]
"""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path

from _timing import lowest  # benchmarks/_timing.py, next to this script

import loopx.status.shards as shards_module
from loopx.model import utcnow
from loopx.root import Layout
from loopx.status.cache import StatusCache
from loopx.status.current import status_cache
from loopx.status.shards import SHARDS, ensure_shard_dir, shard_dir, write_shard


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path)
    parser.add_argument("--passes", type=int, default=5)
    args = parser.parse_args()
    layout = Layout.at(args.root)
    cache = status_cache(layout)
    cache.refresh(now=utcnow(), ttl_s=0)
    every = set(range(SHARDS))
    write = lowest(args.passes, lambda: cache._write(every))  # noqa: SLF001 - the part timed

    def as_files() -> float:
        shutil.rmtree(shard_dir(layout))
        ensure_shard_dir(layout)
        start = time.perf_counter()
        for s in range(SHARDS):
            write_shard(layout, s, *cache._shard(s))  # noqa: SLF001 - the part timed
        return time.perf_counter() - start

    files = min(as_files() for _ in range(args.passes))
    cache._write(every)  # noqa: SLF001 - the pack again
    real_write = vars(shards_module)["atomic_write_bytes"]
    vars(shards_module)["atomic_write_bytes"] = lambda *_a, **_k: None
    try:
        serialise = lowest(args.passes, lambda: cache._write(every))  # noqa: SLF001
    finally:
        vars(shards_module)["atomic_write_bytes"] = real_write

    def load() -> None:
        fresh = StatusCache(layout)
        fresh.load()
        fresh._sync_goals(utcnow(), verify=False)  # noqa: SLF001 - the part timed

    loaded = lowest(args.passes, load)
    size = sum(p.stat().st_size for p in shard_dir(layout).iterdir())
    print(
        f"goals {len(cache.goals)}  shards {size / 1e6:.1f} MB  write {write:.3f} s "
        f"(256 files: {files:.3f} s, {write / files:.2f}x)  serialise {serialise:.3f} s  "
        f"load+goal sync {loaded:.3f} s"
    )


if __name__ == "__main__":
    main()
