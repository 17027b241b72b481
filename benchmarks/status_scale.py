"""How the status projection scales: 100, 1,000 and 10,000 goals with 100 history lines each.

Measures, per size:

* cold: the first refresh of a root with no cache (every goal read), in-process,
  and the real CLI `loopx status --json --clear-cache` once;
* warm CLI: `loopx status --json` while the cache is within its TTL (load + print);
* warm refresh, nothing changed (hinted mode, as the supervisor runs it);
* warm refresh with one changed goal, hinted (the writer noted the change):
  the median of 21 refreshes, each after appending a history line to a different goal;
* the same change without a hint, found by a full fingerprint scan;

and at the largest size, HTTP `GET /status` (first page of 100) and
`GET /status?limit=10000` (everything) against a real `loopx serve`-style
server on 127.0.0.1: median and p99 of sequential requests.

Usage: python benchmarks/status_scale.py [--sizes 100,1000,10000] [--requests 400]
"""

from __future__ import annotations

import argparse
import http.client
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from _fleet import compile_package

from loopx.log import configure_logging
from loopx.model import utcnow
from loopx.root.hints import note_goal_changed
from loopx.status.cache import StatusCache
from loopx.status.current import clear_status_cache
from loopx.testing.status_fixtures import (
    append_history,
    history_line,
    make_root,
    register_goals,
    seed_goal,
)
from loopx.web.server import make_server


def ms(seconds: float) -> str:
    return f"{seconds * 1000:8.2f} ms"


def seed(base: Path, n: int, history: int):
    layout = make_root(base)
    now = utcnow()
    goals = {}
    for i in range(n):
        goal = seed_goal(layout, f"goal-{i:05d}", now=now, history=history, workdir=base)
        goals[goal.id] = goal
    register_goals(layout, goals.values())
    return layout


def cli(layout, *args: str) -> float:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPX_")}
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "loopx", "--root", str(layout.root), "status", "--json", *args],
        check=True,
        stdout=subprocess.DEVNULL,
        env=env,
    )
    return time.perf_counter() - start


def one_change(layout, cache: StatusCache, n: int, rounds: int, *, hinted: bool) -> float:
    times = []
    for r in range(rounds):
        goal_id = f"goal-{(r * 7919) % n:05d}"
        append_history(
            layout,
            [
                history_line(
                    goal_id,
                    (2000 if hinted else 1000) + r,
                    ended_at=utcnow(),
                    summary=f"change {r}",
                )
            ],
        )
        if hinted:
            note_goal_changed(layout, goal_id)
        start = time.perf_counter()
        report = cache.refresh(now=utcnow(), ttl_s=0, full_scan_after_s=0 if not hinted else 3600)
        times.append(time.perf_counter() - start)
        assert report.reread >= 1, report
    return statistics.median(times)


def http_latency(layout, path: str, requests: int) -> tuple[float, float]:
    server = make_server(layout, host="127.0.0.1", port=0, refresh_interval_s=5.0, ttl_s=5.0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=60)
        times = []
        for i in range(requests + 10):
            start = time.perf_counter()
            conn.request("GET", path)
            resp = conn.getresponse()
            resp.read()
            if i >= 10:  # warm-up
                times.append(time.perf_counter() - start)
            assert resp.status == 200
        conn.close()
    finally:
        server.shutdown()
        server.server_close()
    times.sort()
    return statistics.median(times), times[int(len(times) * 0.99) - 1]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="100,1000,10000")
    parser.add_argument("--history", type=int, default=100)
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=21)
    args = parser.parse_args()
    configure_logging(level="warning")
    sizes = [int(s) for s in args.sizes.split(",")]
    rows = {}
    for n in sizes:
        base = Path(tempfile.mkdtemp(prefix=f"loopx-bench-{n}-"))
        try:
            t = time.perf_counter()
            layout = seed(base, n, args.history)
            print(
                f"\n== {n} goals x {args.history} history lines (seeded in {time.perf_counter() - t:.1f}s)"
            )
            row = {}
            cache = StatusCache(layout)
            start = time.perf_counter()
            cache.refresh(now=utcnow(), ttl_s=0)
            row["cold refresh (in-process)"] = time.perf_counter() - start
            clear_status_cache(layout)
            row["cold CLI status --json --clear-cache"] = cli(layout, "--clear-cache")
            row["warm CLI status --json (within TTL)"] = cli(layout, "--ttl", "3600")
            cache = StatusCache(layout)
            cache.refresh(now=utcnow(), ttl_s=0)
            start = time.perf_counter()
            cache.refresh(now=utcnow(), ttl_s=0, full_scan_after_s=3600)
            row["warm refresh, no change (hinted)"] = time.perf_counter() - start
            start = time.perf_counter()
            cache.refresh(now=utcnow(), ttl_s=0, full_scan_after_s=0)
            row["warm refresh, no change (full scan)"] = time.perf_counter() - start
            row["warm refresh, 1 changed goal (hinted)"] = one_change(
                layout, cache, n, args.rounds, hinted=True
            )
            row["warm refresh, 1 changed goal (full scan)"] = one_change(
                layout, cache, n, args.rounds, hinted=False
            )
            for name, value in row.items():
                print(f"  {name:<44} {ms(value)}")
            if n == max(sizes):
                p50, p99 = http_latency(layout, "/status", args.requests)
                row["HTTP /status p50"], row["HTTP /status p99"] = p50, p99
                print(f"  {'HTTP GET /status (page of 100) p50 / p99':<44} {ms(p50)} / {ms(p99)}")
                p50, p99 = http_latency(layout, f"/status?limit={n}", max(20, args.requests // 10))
                row["HTTP /status all p50"], row["HTTP /status all p99"] = p50, p99
                print(f"  {f'HTTP GET /status?limit={n} p50 / p99':<44} {ms(p50)} / {ms(p99)}")
            rows[n] = row
        finally:
            shutil.rmtree(base, ignore_errors=True)
    lo, hi = min(sizes), max(sizes)
    print("\n== ratios (largest / smallest; goal: one changed goal within 2x)")
    for name in (
        "warm refresh, 1 changed goal (hinted)",
        "warm refresh, 1 changed goal (full scan)",
        "warm refresh, no change (hinted)",
    ):
        print(f"  {name:<44} {rows[hi][name] / rows[lo][name]:6.2f}x  ({hi} vs {lo} goals)")
    if "HTTP /status p50" in rows[hi]:
        verdict = "meets" if rows[hi]["HTTP /status p50"] <= 0.010 else "MISSES"
        print(
            f"  HTTP /status p50 at {hi} goals: {ms(rows[hi]['HTTP /status p50'])} ({verdict} the 10 ms goal)"
        )


if __name__ == "__main__":
    compile_package()  # the CLI runs start from bytecode, as an installed loopx does
    main()
