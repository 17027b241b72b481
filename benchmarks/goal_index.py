"""The goal index (`projections/goals.json`) at 10,000 goals: load, save, file size.

Registers N goals like `benchmarks/scale.py`'s (one command host, default quota, one workdir),
a tenth of them with their own quota and priority, builds the index once, then measures, best
of R in this process (CPU seconds):

* load: a new catalog adopting the index file (what every cold `status` and CLI does first);
* save after load: writing it again after a load (every unchanged goal's entry is reused);
* save of new goals: writing it for goals none of which came from the index (after
  `goal import` or a rebuild from the goal files);

each with the cyclic garbage collector enabled, as a command other than `status` runs.

Usage: python benchmarks/goal_index.py [--goals 10000] [--runs 7]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from _fleet import SH_SCRIPT  # benchmarks/_fleet.py, next to this script

from loopx.model import utcnow
from loopx.registry.catalog import GoalCatalog, drop_goal_index
from loopx.registry.goal_index import IndexWriter
from loopx.root import Layout
from loopx.testing.status_fixtures import make_goal, make_root, register_goals


def best(run: Callable[[], object], runs: int) -> float:
    took = []
    for _ in range(runs):
        started = time.process_time()
        run()
        took.append(time.process_time() - started)
    return min(took)


def seed(base: Path, n: int) -> Layout:
    layout = make_root(base / "root")
    now = utcnow()
    host = {"kind": "command", "argv": ["/bin/sh", "-c", SH_SCRIPT]}
    goals = []
    for i in range(n):
        own = (
            {"quota": {"compute": 0.5, "cpu_seconds": 60.0}, "priority": i % 7}
            if i % 10 == 0
            else {}
        )
        goals.append(make_goal(f"g{i:06d}", now=now, workdir=base, host=host, **own))
    register_goals(layout, goals)
    GoalCatalog(layout).refresh(now=now)
    return layout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--goals", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        layout = seed(Path(tmp), args.goals)
        loaded: list[GoalCatalog] = []

        def load() -> None:
            catalog = GoalCatalog(layout)
            assert catalog._load()  # noqa: SLF001 - the step measured
            loaded.append(catalog)

        took_load = best(load, args.runs)
        catalog = loaded[-1]
        took_save = best(catalog._save, args.runs)  # noqa: SLF001

        # Goals read from their files, as after a rebuild: no two share an object.
        drop_goal_index(layout)
        rebuilt = GoalCatalog(layout)
        rebuilt.refresh(now=utcnow())

        def save_new() -> None:
            rebuilt._writer = IndexWriter()  # noqa: SLF001 - forget every entry
            rebuilt._save()  # noqa: SLF001

        took_new = best(save_new, args.runs)
        size = layout.goal_index_file.stat().st_size
    print(f"goals: {args.goals}, index file: {size / 1e6:.2f} MB")
    print(f"load:               {took_load:.4f} s")
    print(f"save after load:    {took_save:.4f} s")
    print(f"save of new goals:  {took_new:.4f} s")


if __name__ == "__main__":
    main()
