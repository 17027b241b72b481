"""Fleet throughput: turns/s with 1, 2, 4, 8 agents on the trivial demo host; RSS; idle CPU.

Run: /work/venv/bin/python benchmarks/fleet_throughput.py [--seconds 10] [--idle-seconds 30]

Goals (issue 5): >= 100 turns/s at 4 agents on a 2-core machine; supervisor
RSS <= 60 MB; an idle fleet (supervisor + 4 agents) uses <= 1% of one core.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

GOALS = 8


def loopx(root: Path, *args: str) -> None:
    subprocess.run([sys.executable, "-m", "loopx", "--root", str(root), *args], check=True, capture_output=True)


# The smallest host that speaks the protocol: no Python start-up, so the control plane shows.
SH_HOST = """sh -c 'echo "{\\"schema_version\\":1,\\"kind\\":\\"progress\\"}" > "$LOOPX_RESULT_FILE"'"""
HOST = "demo"


def make_root(base: Path, goals: int) -> Path:
    root = base / "root"
    loopx(root, "init")
    for i in range(goals):
        work = base / f"w{i}"
        work.mkdir()
        host = ["--host-kind", "demo", "--host=--steps 100000000"] if HOST == "demo" else ["--host", SH_HOST]
        loopx(root, "goal", "add", f"g{i}", "--objective", "bench", "--workdir", str(work), *host)
    return root


def turns(root: Path) -> int:
    return sum(len(os.listdir(d / "turns")) for d in (root / "goals").iterdir() if (d / "turns").is_dir())


def start(root: Path, agents: int) -> tuple[subprocess.Popen[bytes], psutil.Process]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPX_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "loopx", "--root", str(root), "supervisor", "run", "--agents", str(agents)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    sup = psutil.Process(proc.pid)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        kids = [k for k in sup.children() if "loopx.agents" in " ".join(k.cmdline())]
        if len(kids) == agents and all((root / "agents" / f"agent-{i}.json").exists() for i in range(1, agents + 1)):
            return proc, sup
        time.sleep(0.1)
    raise SystemExit("fleet did not start")


def agents_of(sup: psutil.Process) -> list[psutil.Process]:
    return [k for k in sup.children() if "loopx.agents" in " ".join(k.cmdline())]


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)


def throughput(agents: int, seconds: float) -> tuple[float, float, float]:
    with tempfile.TemporaryDirectory() as tmp:
        root = make_root(Path(tmp), GOALS)
        proc, sup = start(root, agents)
        try:
            time.sleep(2)  # warm up: first turns, caches
            n0, t0 = turns(root), time.monotonic()
            time.sleep(seconds)
            n1, t1 = turns(root), time.monotonic()
            sup_rss = sup.memory_info().rss / 2**20
            agent_rss = max(a.memory_info().rss for a in agents_of(sup)) / 2**20
        finally:
            stop(proc)
    return (n1 - n0) / (t1 - t0), sup_rss, agent_rss


def idle_cpu(agents: int, seconds: float) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        root = make_root(Path(tmp), 0)
        proc, sup = start(root, agents)
        try:
            time.sleep(3)  # let start-up settle
            procs = [sup, *agents_of(sup)]
            before = sum(p.cpu_times().user + p.cpu_times().system for p in procs)
            time.sleep(seconds)
            after = sum(p.cpu_times().user + p.cpu_times().system for p in procs)
        finally:
            stop(proc)
    return (after - before) / seconds * 100


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--idle-seconds", type=float, default=30.0)
    parser.add_argument("--agents", type=int, nargs="*", default=[1, 2, 4, 8])
    parser.add_argument("--host", choices=["demo", "sh"], default="demo",
                        help="demo: python -m loopx.agents.demo; sh: a one-line shell host")
    args = parser.parse_args()
    global HOST  # noqa: PLW0603 - one benchmark run, one host kind
    HOST = args.host
    print(f"cores: {os.cpu_count()}  host: {HOST}  goals: {GOALS}  window: {args.seconds:.0f}s per run")
    print("agents  turns/s  supervisor RSS MB  agent RSS MB")
    results = {}
    for n in args.agents:
        rate, sup_rss, agent_rss = throughput(n, args.seconds)
        results[n] = (rate, sup_rss)
        print(f"{n:>6}  {rate:>7.1f}  {sup_rss:>17.1f}  {agent_rss:>12.1f}", flush=True)
    cpu = idle_cpu(4, args.idle_seconds)
    print(f"idle fleet (supervisor + 4 agents) over {args.idle_seconds:.0f}s: {cpu:.2f}% of one core")
    if 4 in results:
        rate, sup_rss = results[4]
        print(f"goal >= 100 turns/s at 4 agents: {rate:.1f} ({'met' if rate >= 100 else 'MISSED'})")
        print(f"goal supervisor RSS <= 60 MB: {sup_rss:.1f} ({'met' if sup_rss <= 60 else 'MISSED'})")
    print(f"goal idle <= 1% of a core: {cpu:.2f}% ({'met' if cpu <= 1 else 'MISSED'})")


if __name__ == "__main__":
    main()
