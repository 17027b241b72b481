"""Ray back-end next to the local back-end: start time and turns per second, same machine, same run.

Run: /work/venv/bin/python benchmarks/ray_fleet.py [--agents 2] [--seconds 15] [--goals 8]

For each back-end, a fresh root with ``--goals`` demo goals that never
complete, then ``loopx supervisor run --backend B --agents N`` as a real
subprocess:

* start time: from launching the supervisor until every agent has written
  its first heartbeat (for Ray this includes starting a private local
  cluster, ``ray.init``, and creating the actors);
* turns/s: committed history lines over ``--seconds`` once all agents run;
* stop time: SIGTERM until the supervisor exited.

Ray stays loopback-only (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``) and sends
no usage report.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import tempfile
import time
from pathlib import Path

from _fleet import (  # benchmarks/_fleet.py, next to this script
    DEMO_HOST,
    ENV,
    init_root,
    start_fleet,
)

RAY_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"}


def history_lines(root: Path) -> int:
    total = 0
    for path in (root / "goals").glob("*/history.jsonl"):
        total += path.read_bytes().count(b"\n")
    return total


def agents_beating(root: Path, n: int, since: float) -> bool:
    beats = 0
    for path in (root / "agents").glob("*.json"):
        if path.stat().st_mtime >= since:
            beats += 1
    return beats >= n


def wait(what: str, check, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.02)


def run_backend(
    backend: str, agents: int, goals: int, seconds: float, base: Path
) -> dict[str, float]:
    root = base / backend / "root"
    init_root(root, base / backend, goals, DEMO_HOST)
    options = ["--backend", backend]
    if backend == "ray":
        options += ["--agent-cpus", str(min(1.0, (os.cpu_count() or 2) / agents))]
    log = open(base / f"{backend}-supervisor.log", "wb")  # noqa: SIM115 - closed below
    wall0 = time.time()
    t0 = time.monotonic()
    proc, _ = start_fleet(root, agents, *options, env=ENV | RAY_ENV, output=log)
    try:
        wait(
            "agents to beat",
            lambda: (root / "agents").is_dir() and agents_beating(root, agents, wall0),
        )
        start_s = time.monotonic() - t0
        first = history_lines(root)
        t1 = time.monotonic()
        time.sleep(seconds)
        turns = history_lines(root) - first
        rate = turns / (time.monotonic() - t1)
        t2 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
        stop_s = time.monotonic() - t2
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()
    return {"start_s": start_s, "turns_per_s": rate, "turns": turns, "stop_s": stop_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--goals", type=int, default=8)
    parser.add_argument("--json", action="store_true")
    opts = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory(prefix="loopx-ray-bench-") as tmp:
        for backend in ("local", "ray"):
            results[backend] = run_backend(
                backend, opts.agents, opts.goals, opts.seconds, Path(tmp)
            )
    if opts.json:
        print(json.dumps(results, indent=2))
        return
    print(
        f"{opts.agents} agents, {opts.goals} demo goals, {opts.seconds:.0f} s measured, {os.cpu_count()} CPUs"
    )
    print(f"{'backend':<8} {'start s':>8} {'turns/s':>8} {'turns':>6} {'stop s':>7}")
    for backend, r in results.items():
        print(
            f"{backend:<8} {r['start_s']:>8.2f} {r['turns_per_s']:>8.1f} {r['turns']:>6.0f} {r['stop_s']:>7.2f}"
        )


if __name__ == "__main__":
    main()
