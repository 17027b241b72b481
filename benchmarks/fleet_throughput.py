"""Fleet throughput: turns/s with 1, 2, 4, 8 agents next to the machine's spawn ceiling; RSS; idle CPU.

Run: /work/venv/bin/python benchmarks/fleet_throughput.py [--seconds 10] [--idle-seconds 30]
     [--agents 1 2 4 8] [--host demo demo-isolated sh]

Targets: >= 100 turns/s at 4 agents on a 2-core machine; supervisor
RSS <= 60 MB; an idle fleet (supervisor + 4 agents) uses <= 1% of one core.

A turn cannot be cheaper than starting its host, so each row also measures,
in the same run, the physical ceiling: how many times N plain threads can
spawn the same host argv (same envelope on stdin, same environment, own
session, pipes read, waited for) per second with no control plane at all,
and prints the fleet's share of it. Hosts:

* ``demo``: the demo host as goals use it, ``python -m loopx.agents.demo``
  (Python start-up with ``site`` and the editable-install finder);
* ``demo-isolated``: the same demo program as a command host started
  ``python -I -S .../loopx/agents/demo.py`` (no ``site``: the demo needs only
  the standard library), the cheapest Python host;
* ``sh``: a one-line shell host writing the result file, so the control
  plane shows.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from _fleet import (  # benchmarks/_fleet.py, next to this script
    DEMO_HOST,
    DEMO_STEPS,
    ENV,
    SH_SCRIPT,
    agents_of,
    cpu_seconds,
    init_root,
    start_fleet,
    stop_fleet,
    turns,
    wait_for_agents,
)

GOALS = 8


def demo_path() -> str:
    spec = importlib.util.find_spec("loopx.agents.demo")
    assert spec is not None and spec.origin is not None
    return spec.origin


def host_argv(host: str) -> list[str]:
    """The argv each turn of a ``host`` goal spawns (what the ceiling spawns too)."""
    if host == "demo":
        return [sys.executable, "-m", "loopx.agents.demo", "--steps", DEMO_STEPS]
    if host == "demo-isolated":
        return [sys.executable, "-I", "-S", demo_path(), "--steps", DEMO_STEPS]
    return ["/bin/sh", "-c", SH_SCRIPT]


def host_options(host: str) -> list[str]:
    """`loopx goal add` options registering a ``host`` goal."""
    if host == "demo":
        return DEMO_HOST
    return ["--host", shlex.join(host_argv(host))]


def make_root(base: Path, goals: int, host: str) -> Path:
    root = base / "root"
    init_root(root, base, goals, host_options(host))
    return root


def throughput(host: str, agents: int, seconds: float) -> tuple[float, float, float, float]:
    """turns/s, supervisor RSS MB, largest agent RSS MB, control-plane CPU ms per turn."""
    with tempfile.TemporaryDirectory() as tmp:
        root = make_root(Path(tmp), GOALS, host)
        proc, sup = start_fleet(root, agents)
        try:
            wait_for_agents(root, sup, agents)
            time.sleep(2)  # warm up: first turns, caches
            plane = [sup, *agents_of(sup)]
            n0, t0, c0 = turns(root), time.monotonic(), sum(cpu_seconds(plane).values())
            time.sleep(seconds)
            n1, t1, c1 = turns(root), time.monotonic(), sum(cpu_seconds(plane).values())
            sup_rss = sup.memory_info().rss / 2**20
            agent_rss = max(a.memory_info().rss for a in agents_of(sup)) / 2**20
        finally:
            stop_fleet(proc)
    done = max(n1 - n0, 1)
    return done / (t1 - t0), sup_rss, agent_rss, (c1 - c0) / done * 1000


def ceiling(host: str, workers: int, seconds: float, *, durable: bool = False) -> float:
    """Host spawns per second ``workers`` threads achieve with no control plane (same argv).

    ``durable``: each spawn also makes the four fsync'd atomic writes any
    crash-safe turn needs (intent, outcome, writeback, commit; the floor of
    ``benchmarks/turn_overhead.py``), which gives the crash-safe floor.
    """
    from loopx.storage.files import atomic_write_bytes

    argv = host_argv(host)
    done = [0] * workers
    end = time.monotonic() + seconds + 1.0  # the first second is a warm-up, not counted
    count_from = time.monotonic() + 1.0

    def work(i: int, wd: Path) -> None:
        n = 0
        while time.monotonic() < end:
            n += 1
            key = f"c{i}-t{n:06d}-e1"
            env = {
                **ENV,
                "LOOPX_TURN_KEY": key,
                "LOOPX_GOAL_ID": f"c{i}",
                "LOOPX_WORKDIR": str(wd),
                "LOOPX_RESULT_FILE": str(wd / "result.json"),
            }
            envelope = json.dumps(
                {"schema_version": 1, "goal_id": f"c{i}", "turn_key": key}
            ).encode()
            if durable:
                atomic_write_bytes(wd / "intent.json", envelope)
            subprocess.run(
                argv,
                input=envelope,
                cwd=wd,
                env=env,
                capture_output=True,
                start_new_session=True,
                check=False,
            )
            if durable:
                for name in ("outcome.json", "writeback.json", "commit.json"):
                    atomic_write_bytes(wd / name, envelope)
            if time.monotonic() >= count_from:
                done[i] += 1

    with tempfile.TemporaryDirectory() as tmp:
        threads = []
        for i in range(workers):
            wd = Path(tmp) / f"w{i}"
            wd.mkdir()
            threads.append(threading.Thread(target=work, args=(i, wd)))
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    return sum(done) / seconds


def idle_cpu(agents: int, seconds: float) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        root = make_root(Path(tmp), 0, "sh")
        proc, sup = start_fleet(root, agents)
        try:
            wait_for_agents(root, sup, agents)
            time.sleep(3)  # let start-up settle
            procs = [sup, *agents_of(sup)]
            before = sum(cpu_seconds(procs).values())
            time.sleep(seconds)
            after = sum(cpu_seconds(procs).values())
        finally:
            stop_fleet(proc)
    return (after - before) / seconds * 100


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--idle-seconds", type=float, default=30.0)
    parser.add_argument("--agents", type=int, nargs="*", default=[1, 2, 4, 8])
    parser.add_argument(
        "--host",
        nargs="+",
        choices=["demo", "demo-isolated", "sh"],
        default=["demo", "demo-isolated", "sh"],
        help="host kinds to measure",
    )
    args = parser.parse_args()
    print(
        f"cores: {os.cpu_count()}  goals: {GOALS}  window: {args.seconds:.0f}s per run  "
        f"load average at start: {os.getloadavg()[0]:.2f}"
    )
    print("ceiling = spawns/s of the same host argv by N threads, no control plane, same run")
    print("plane ms/turn = CPU of the supervisor and agents (hosts excluded) per turn")
    print("safe floor = the same with the 4 fsync'd writes any crash-safe turn needs per spawn")
    print(
        f"{'host':<14} {'agents':>6} {'turns/s':>8} {'ceiling/s':>9} {'share':>6} "
        f"{'safe floor/s':>12} {'share':>6} {'plane ms/turn':>13} {'sup RSS MB':>10} {'agent RSS MB':>12}"
    )
    at4: dict[str, tuple[float, float, float]] = {}
    for host in args.host:
        for n in args.agents:
            rate, sup_rss, agent_rss, plane_ms = throughput(host, n, args.seconds)
            roof = ceiling(host, n, args.seconds)
            safe = ceiling(host, n, args.seconds, durable=True)
            share = rate / roof if roof else 0.0
            if n == 4:
                at4[host] = (rate, roof, sup_rss)
            print(
                f"{host:<14} {n:>6} {rate:>8.1f} {roof:>9.1f} {share:>6.0%} {safe:>12.1f} "
                f"{rate / safe if safe else 0.0:>6.0%} {plane_ms:>13.1f} "
                f"{sup_rss:>10.1f} {agent_rss:>12.1f}",
                flush=True,
            )
    cpu = idle_cpu(4, args.idle_seconds)
    print(
        f"idle fleet (supervisor + 4 agents) over {args.idle_seconds:.0f}s: {cpu:.2f}% of one core"
    )
    for host, (rate, roof, sup_rss) in at4.items():
        verdict = (
            "met"
            if rate >= 100
            else ("MISSED; the ceiling itself is below 100" if roof < 100 else "MISSED")
        )
        print(
            f"goal >= 100 turns/s at 4 agents ({host}): {rate:.1f} ({verdict}); "
            f"{rate / roof:.0%} of the {roof:.1f}/s spawn ceiling"
        )
        print(
            f"goal supervisor RSS <= 60 MB ({host}): {sup_rss:.1f} ({'met' if sup_rss <= 60 else 'MISSED'})"
        )
    print(f"goal idle <= 1% of a core: {cpu:.2f}% ({'met' if cpu <= 1 else 'MISSED'})")


if __name__ == "__main__":
    main()
