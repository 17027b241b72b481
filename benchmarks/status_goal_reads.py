"""What a cold status refresh reads per goal, on an existing root, in-process.

Times three parts of ``loopx status --json --clear-cache`` apart from the rest:
every active goal's fingerprint (``goal_fingerprint``), then for the goals
that ran (any of state, lease, history or ledger present) the reads of
``gather_goal`` with the history counters, and ``window_spend`` (the quota
decision's reader) of the same goals. Each part runs ``--passes`` times; the
lowest process CPU time is printed. Read-only once the quota aggregates are
current (the first pass may rewrite them, as a first status would).

    python benchmarks/status_goal_reads.py ROOT [--passes 7]
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from _timing import lowest  # benchmarks/_timing.py, next to this script

from loopx.model import utcnow
from loopx.quota.ledger import window_spend
from loopx.registry.catalog import goal_catalog
from loopx.registry.goalrecords import GoalStatus
from loopx.root import Layout
from loopx.status.fingerprint import absent_files, goal_fingerprint
from loopx.status.sources import gather_goal

READ = frozenset({"state.json", "lease.json", "history.jsonl", "quota.jsonl"})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path)
    parser.add_argument("--passes", type=int, default=7)
    args = parser.parse_args()
    layout = Layout.at(args.root)
    now = utcnow()
    catalog = goal_catalog(layout)
    catalog.refresh(now=now, verify=False)
    goals = {
        g.id: g for g in catalog.registry().goals.values() if g.status is not GoalStatus.ARCHIVED
    }
    goals_dir = str(layout.goals_dir)
    dirs = {g: os.path.join(goals_dir, g) for g in goals}
    absent = {g: absent_files(goal_fingerprint(d)) for g, d in dirs.items()}
    ran = [g for g in goals if not absent[g] >= READ]

    def fingerprints() -> None:
        for d in dirs.values():
            goal_fingerprint(d)

    def gathers() -> None:
        for g in ran:
            gather_goal(layout, goals[g], now=now, absent=absent[g])

    def windows() -> None:
        for g in ran:
            if "quota.jsonl" not in absent[g]:
                window_spend(layout, g, window_start=goals[g].quota.window_start(now))

    print(f"{len(goals)} goals, {len(ran)} ran; lowest CPU of {args.passes} passes:")
    for name, work, count in (
        ("goal_fingerprint, every goal", fingerprints, len(goals)),
        ("gather_goal + counts, goals that ran", gathers, len(ran)),
        ("window_spend, goals that ran", windows, len(ran)),
    ):
        seconds = lowest(args.passes, work, clock=time.process_time)
        print(f"  {name:38s} {seconds:.3f} s  ({seconds / max(count, 1) * 1e6:.0f} us a goal)")


if __name__ == "__main__":
    main()
