"""Quota decisions per second with ledgers of 10, 10,000 and 1,000,000 lines.

Measures ``loopx.quota.decision.decide`` in its steady state (the goal's aggregate
cache already built, nothing new in the ledger): load the state, check the
cache against the ledger, sum the window, measure the host with psutil,
decide. Prints the one-time cost of building the cache from the whole
ledger separately. The goal is a flat cost: slowest / fastest <= 2.

Turns are spaced 10 minutes apart and the window is 24 h, so every ledger
of 144 lines or more has the same 144 turns in its window; only the
history behind them grows.

    /work/venv/bin/python benchmarks/quota_decision.py [--seconds 2] [--sizes 10,10000,1000000]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from loopx.quota.decision import decide
from loopx.registry.goals import GoalChanges, add_goal, get_goal
from loopx.root import Layout, ResolvedRoot, RootSource, open_root

NOW = datetime(2030, 1, 1, tzinfo=UTC)
SPACING_S = 600  # one turn every 10 minutes
GOAL = "bench"


def write_ledger(path: Path, lines: int) -> None:
    """Write ``lines`` spend records directly, newest ending a minute before NOW."""
    end0 = NOW.timestamp() - 60 - SPACING_S * (lines - 1)
    template = (
        '{{"schema_version":1,"turn_key":"bench-{i:07d}-1","goal_id":"bench","seq":{i},'
        '"usage":{{"cpu_s":{cpu:.3f},"wall_s":{wall:.3f},"peak_rss_mb":120.5,'
        '"input_tokens":{tok},"output_tokens":40,"cost_usd":0.002}},'
        '"started_at":"{start}","ended_at":"{end}"}}\n'
    )
    with path.open("w", encoding="ascii") as f:
        batch = []
        for i in range(lines):
            end = end0 + SPACING_S * i
            batch.append(
                template.format(
                    i=i,
                    cpu=10 + i % 17,
                    wall=30 + i % 29,
                    tok=1000 + i % 500,
                    start=_iso(end - 45),
                    end=_iso(end),
                )
            )
            if len(batch) == 10_000:
                f.write("".join(batch))
                batch.clear()
        f.write("".join(batch))


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def bench(base: Path, lines: int, seconds: float) -> dict[str, float]:
    root = base / f"root-{lines}"
    layout = open_root(ResolvedRoot(root, root / "registry.json", RootSource.FLAG), create=True)
    add_goal(
        layout,
        GOAL,
        GoalChanges(objective="benchmark", quota={"compute": 0.5, "window_hours": 24}),
        update=False,
        default_workdir=base,
        now=NOW,
    )
    goal = get_goal(layout, GOAL)
    t = time.perf_counter()
    write_ledger(layout.quota_file(GOAL), lines)
    generated = time.perf_counter() - t

    t = time.perf_counter()
    first = decide(layout, goal, now=NOW)  # builds the aggregate from the whole ledger
    rebuild = time.perf_counter() - t

    for _ in range(50):  # warm up
        decide(layout, goal, now=NOW)
    count = 0
    t = time.perf_counter()
    deadline = t + seconds
    while True:
        decide(layout, goal, now=NOW)
        count += 1
        if count % 50 == 0 and time.perf_counter() >= deadline:
            break
    elapsed = time.perf_counter() - t
    return {
        "lines": lines,
        "ledger_mb": layout.quota_file(GOAL).stat().st_size / 1e6,
        "generate_s": generated,
        "rebuild_s": rebuild,
        "window_turns": first.spent_turns,
        "cache_kb": Layout.at(root).quota_aggregate_file(GOAL).stat().st_size / 1e3,
        "per_s": count / elapsed,
        "us": elapsed / count * 1e6,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="timed run per size")
    parser.add_argument("--sizes", default="10,10000,1000000", help="ledger lines, comma-separated")
    parser.add_argument("--dir", type=Path, default=None, help="where to build the roots")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        results = [bench(Path(tmp), n, args.seconds) for n in sizes]
    print(
        f"{'ledger lines':>12} {'ledger MB':>9} {'in window':>9} {'cache KB':>8} "
        f"{'rebuild s':>9} {'decisions/s':>11} {'us/decision':>11}"
    )
    for r in results:
        print(
            f"{r['lines']:>12,} {r['ledger_mb']:>9.1f} {r['window_turns']:>9} "
            f"{r['cache_kb']:>8.1f} {r['rebuild_s']:>9.3f} {r['per_s']:>11,.0f} {r['us']:>11.1f}"
        )
    fastest = max(r["per_s"] for r in results)
    slowest = min(r["per_s"] for r in results)
    ratio = fastest / slowest
    verdict = "PASS" if ratio <= 2 else "FAIL"
    print(f"slowest/fastest cost ratio: {ratio:.2f} (goal <= 2.00): {verdict}")


if __name__ == "__main__":
    main()
