"""Scale: what a turn, an idle poll and a goal change cost at 10, 1,000, 10,000 (100,000) goals.

For each size, in one run, on a fresh root:

* ``goal import``: registering every goal from one JSON Lines file (the real CLI);
* fleet turns/s with 2 and 4 agents, every goal active with a one-line ``sh``
  host that writes a ``progress`` result (after the fleet's first turn);
* idle fleet CPU (supervisor + 2 agents, % of one core) with every goal waiting
  a day (``next_eligible_at`` tomorrow);
* ``loopx goal add`` latency (median of 3);
* ``loopx status --json --clear-cache`` (cold: best of 3, each from no cache; wall clock
  and CPU) and
  ``loopx status --json`` (warm: within the cache's TTL, passed as ``--ttl 300``; best of 5,
  each run next to one of ``python3 -c pass``, whose best is the size's reference);
* ``GET /status`` (first page of 100) on a real status server: median of ``--requests``;
* ``loopx quota should-run ID``: its first call (cold: decides, stores the decision)
  and, warm, as a user's repeated call (best of 5 after it, paired with bare Python likewise);
* recovery of interrupted journals (``--journals 10,1000``): a root with one goal per
  journal, each goal's turn interrupted after ``durable_writeback`` (the first by the real
  fault point, ``LOOPX_FAULT``, the others copies of it renamed to their goal), then
  ``loopx recover``; printed with the ratio to the first count.

``--only idle,recovery`` measures only the named parts (``cli``, ``import``, ``turns``,
``add``, ``quota``, ``status``, ``idle``, ``recovery``; ``status`` includes ``GET /status``);
the idle part also prints each process's share.

CLI figures are CPU seconds (user + system) of the command unless ``--wall``;
and once: ``python3 -c pass``, ``loopx --help`` and ``loopx --version`` (best of 5
each). Every figure is printed with its ratio to the 10-goal figure.

Usage: python benchmarks/scale.py [--sizes 10,1000,10000] [--large] [--seconds 10]
       [--idle-seconds 20] [--requests 200] [--journals 10,1000] [--only PART,...] [--wall]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import psutil
from _fleet import ENV, SH_SCRIPT, compile_package, cpu_seconds, start_fleet, stop_fleet, turns
from status_scale import http_latency  # benchmarks/status_scale.py, next to this script

from loopx.log import configure_logging
from loopx.model import utcnow
from loopx.root import Layout
from loopx.root.hints import note_goal_changed
from loopx.state import GoalState
from loopx.storage.files import atomic_write_model

WALL = "--wall" in sys.argv
PARTS = ("cli", "import", "turns", "add", "quota", "status", "idle", "recovery")
PYDANTIC_FLOOR = "from pydantic import BaseModel\nclass M(BaseModel):\n    x: int"


def child_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(argv: list[str], *, check: bool = True) -> float:
    """Run ``argv`` once; returns its CPU seconds (user + system), or wall seconds with --wall.

    CPU time, not wall time, by default: on a shared machine whose load average is
    many times its core count, a process's wall time is mostly waiting for a core.
    """
    started, cpu = time.perf_counter(), child_cpu()
    subprocess.run(argv, check=check, capture_output=True, env=ENV)
    return (time.perf_counter() - started) if WALL else (child_cpu() - cpu)


def timed_both(argv: list[str]) -> tuple[float, float]:
    """Run ``argv`` once; returns its (wall, CPU) seconds, CPU counting the children it waited for."""
    started, cpu = time.perf_counter(), child_cpu()
    subprocess.run(argv, check=True, capture_output=True, env=ENV)
    return time.perf_counter() - started, child_cpu() - cpu


def cli(root: Path, *args: str) -> list[str]:
    """The real CLI's argv on ``root``."""
    return [sys.executable, "-m", "loopx", "--root", str(root), *args]


def loopx(root: Path, *args: str, check: bool = True) -> float:
    """Run the real CLI once; returns its CPU (or wall) seconds."""
    return timed(cli(root, *args), check=check)


def best_of(argv: list[str], runs: int = 5) -> float:
    return min(timed(argv) for _ in range(runs))


BARE = "python3 -c pass (s)"  # measured beside each size's warm CLI figures


def paired_best(
    argv: list[str], out: dict[str, float], *, runs: int = 5, check: bool = True
) -> float:
    """Best of ``runs`` of ``argv``, each run next to one of bare Python (kept in ``out``).

    This machine's speed drifts by more than 1.5x over minutes (other virtual
    machines on the host): a ratio to bare Python is only meaningful when both
    are measured at the same time.
    """
    bare, took = [], []
    for _ in range(runs):
        bare.append(timed([sys.executable, "-c", "pass"]))
        took.append(timed(argv, check=check))
    out[BARE] = min(out.get(BARE, float("inf")), *bare)
    return min(took)


def import_goals(base: Path, root: Path, n: int) -> float:
    work = base / "work"
    work.mkdir(exist_ok=True)
    source = base / "goals.jsonl"
    with source.open("w") as f:
        for i in range(n):
            # A workdir each: goals sharing one take turns (one turn per workdir).
            (work / f"g{i:06d}").mkdir(exist_ok=True)
            entry = {
                "id": f"g{i:06d}",
                "objective": "bench",
                "workdir": str(work / f"g{i:06d}"),
                "host": {"kind": "command", "argv": ["/bin/sh", "-c", SH_SCRIPT]},
            }
            f.write(json.dumps(entry) + "\n")
    loopx(root, "init")
    return loopx(root, "goal", "import", str(source))


def tree_cpu(sup: psutil.Process) -> dict[int, float]:
    """CPU seconds (user + system) of the supervisor and each of its descendants, by pid."""
    return cpu_seconds([sup, *sup.children(recursive=True)])


def throughput(root: Path, agents: int, seconds: float) -> float:
    proc, _ = start_fleet(root, agents)
    try:
        first = turns(root)
        deadline = time.monotonic() + 600
        while turns(root) <= first + agents and time.monotonic() < deadline:
            time.sleep(0.5)  # every agent built its index and ran a turn
        n0, t0 = turns(root), time.monotonic()
        time.sleep(seconds)
        n1, t1 = turns(root), time.monotonic()
    finally:
        stop_fleet(proc)
    return (n1 - n0) / (t1 - t0)


def http_p50(root: Path, requests: int) -> float:
    """``GET /status`` (first page of 100) on a real server in this process: median in ms."""
    configure_logging(level="warning")
    p50, _ = http_latency(Layout.at(root), "/status", requests)
    return p50 * 1000


def make_all_wait(root: Path) -> None:
    """Every goal's next turn tomorrow: an idle fleet has nothing to do for a day.

    Each write leaves its change hint, as LoopX's own writers do; without them the
    fleet's safety nets would find the 10,000 changes inside the measured window.
    """
    layout = Layout.at(root)
    now = utcnow()
    tomorrow = now + timedelta(days=1)
    for name in os.listdir(layout.goals_dir):
        state = GoalState(goal_id=name, next_eligible_at=tomorrow, updated_at=now)
        atomic_write_model(layout.state_file(name), state, durable=False)
        note_goal_changed(layout, name)
    os.sync()


def idle_cpu(root: Path, seconds: float) -> float:
    for old in (root / "agents").glob("*.json"):
        old.unlink()  # heartbeats of the earlier fleets
    proc, sup = start_fleet(root, 2)
    try:
        deadline = time.monotonic() + 600
        # Settled: both agents built their index (heartbeats say idle).
        while time.monotonic() < deadline:
            beats = [root / "agents" / f"agent-{i}.json" for i in (1, 2)]
            if all(b.exists() and '"idle"' in b.read_text() for b in beats):
                break
            time.sleep(0.5)
        time.sleep(2)
        before, t0 = tree_cpu(sup), time.monotonic()
        peak: dict[int, int] = {}
        while time.monotonic() < t0 + seconds:  # RSS sampled once a second meanwhile
            for p in [sup, *sup.children(recursive=True)]:
                with contextlib.suppress(psutil.Error):
                    peak[p.pid] = max(peak.get(p.pid, 0), p.memory_info().rss)
            time.sleep(1)
        after, t1 = tree_cpu(sup), time.monotonic()
        rss = sup.memory_info().rss
    finally:
        stop_fleet(proc)
    spent = {pid: after[pid] - before.get(pid, 0.0) for pid in after}
    shares = ", ".join(
        f"{'supervisor' if pid == sup.pid else pid} {cpu / (t1 - t0) * 100:.2f}%"
        for pid, cpu in spent.items()
    )
    print(f"    idle CPU by process (% of a core): {shares}", flush=True)
    print(
        f"    supervisor RSS {rss / 2**20:.0f} MiB (peak in the window {peak[sup.pid] / 2**20:.0f})",
        flush=True,
    )
    return sum(spent.values()) / (t1 - t0) * 100


def interrupted_journals(base: Path, root: Path, n: int) -> None:
    """``n`` goals, each with one turn journal interrupted after ``durable_writeback``.

    The first goal's turn is killed at the real fault point; the others get a copy
    of its files with the goal id replaced (same length), as if each had crashed
    the same way: recovery sees ``n`` journals in the same mid phase.
    """
    import_goals(base, root, n)
    proc = subprocess.run(
        [sys.executable, "-m", "loopx", "--root", str(root), "turn", "run-once", "g000000"],
        env={**ENV, "LOOPX_FAULT": "after:durable_writeback"},
        capture_output=True,
        check=False,
    )
    assert proc.returncode == 137, proc.stderr
    source = root / "goals" / "g000000"
    files = {
        path.relative_to(source): path.read_bytes()
        for path in source.rglob("*")
        if path.is_file() and path.name != "goal.json" and not path.name.endswith(".lock")
    }
    for i in range(1, n):
        goal_id = f"g{i:06d}".encode()
        target = root / "goals" / goal_id.decode()
        for rel, data in files.items():
            path = target / str(rel).replace("g000000", goal_id.decode())
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data.replace(b"g000000", goal_id))


def recovery(journals: list[int]) -> None:
    """CPU seconds of ``loopx recover`` over 10 and 1,000 interrupted journals (and per journal)."""
    results: dict[int, float] = {}
    for n in journals:
        with tempfile.TemporaryDirectory() as tmp:
            base = Path(tmp)
            root = base / "root"
            interrupted_journals(base, root, n)
            results[n] = loopx(root, "recover")
            left = sum(
                1
                for path in (root / "goals").glob("*/turns/*.json")
                if "in_progress" in path.read_text()
            )
            assert left == 0, f"{left} journals still in progress after recover"
        ratio = results[n] / results[journals[0]]
        per = results[n] / n * 1000
        unit = "wall" if WALL else "CPU"
        print(
            f"recover {n:>6,} interrupted journals: {results[n]:8.3f} s {unit} "
            f"({per:.1f} ms each; {ratio:.2f}x the {journals[0]:,}-journal figure)",
            flush=True,
        )


class Figures(dict[str, float]):
    """Figures of one size, each printed as soon as it is measured."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n

    def __setitem__(self, key: str, value: float) -> None:
        super().__setitem__(key, value)
        print(f"  {self.n} goals: {key} = {value:.3f}", flush=True)


def measure(n: int, args: argparse.Namespace) -> dict[str, float]:
    out = Figures(n)
    parts = args.only
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        root = base / "root"
        took = import_goals(base, root, n)
        if "import" in parts:
            out["goal import (s)"] = took
        if "turns" in parts:
            for agents in (2, 4):
                out[f"turns/s, {agents} agents"] = throughput(root, agents, args.seconds)
        if "add" in parts:
            out["goal add (s)"] = statistics.median(
                loopx(root, "goal", "add", f"new{i}", "--objective", "x") for i in range(3)
            )
        if "quota" in parts:
            # The first call decides and stores the decision; a user's repeated call is
            # warm (it prints the stored decision while it holds). Warm: best of 5, like
            # bare python's, which it is compared with.
            should_run = ("quota", "should-run", "g000000")
            out["quota should-run cold (s)"] = loopx(root, *should_run, check=False)
            out["quota should-run (s)"] = paired_best(cli(root, *should_run), out, check=False)
        if "status" in parts:
            # Cold: best of 3, each from no cache (a single run is at the mercy of the load).
            # By wall clock, what a user waits, and by CPU (children included).
            cold = [timed_both(cli(root, "status", "--json", "--clear-cache")) for _ in range(3)]
            out["status cold, wall (s)"] = min(wall for wall, _ in cold)
            out["status cold, CPU (s)"] = min(cpu for _, cpu in cold)
            # Warm: within the TTL of the cache the cold run left. The default TTL (5 s) can
            # expire while a loaded machine runs the cold command, so give it 5 minutes.
            out["status warm (s)"] = paired_best(cli(root, "status", "--json", "--ttl", "300"), out)
            out["HTTP /status p50 (ms)"] = http_p50(root, args.requests)
        if "idle" in parts:
            make_all_wait(root)
            out["idle fleet CPU (% core)"] = idle_cpu(root, args.idle_seconds)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="10,1000,10000")
    parser.add_argument("--large", action="store_true", help="also 100,000 goals")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--idle-seconds", type=float, default=20.0)
    parser.add_argument("--journals", default="10,1000", help="interrupted journals to recover")
    parser.add_argument(
        "--only", default=",".join(PARTS), help="parts to measure: " + ",".join(PARTS)
    )
    parser.add_argument("--wall", action="store_true", help="time CLI figures by wall clock")
    parser.add_argument("--requests", type=int, default=200, help="GET /status requests per size")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")] + ([100_000] if args.large else [])
    args.only = set(args.only.split(","))
    if unknown := args.only - set(PARTS):
        parser.error(f"--only: unknown parts {sorted(unknown)}; choose from {','.join(PARTS)}")

    compile_package()
    bare = best_of([sys.executable, "-c", "pass"])
    if "cli" in args.only:
        cli = [sys.executable, "-m", "loopx"]
        print(f"python3 -c pass      {bare * 1000:7.1f} ms")
        for what in ("--help", "--version"):
            took = best_of([*cli, what])
            print(f"loopx {what:<14} {took * 1000:7.1f} ms  ({took / bare:.2f}x bare python)")
        # The floor of a command that reads one LoopX file through its model (should-run
        # does): importing pydantic and building one model class, nothing of LoopX.
        floor = best_of([sys.executable, "-c", PYDANTIC_FLOOR])
        print(f"pydantic + 1 model   {floor * 1000:7.1f} ms  ({floor / bare:.2f}x bare python)")
        print()

    results: dict[int, dict[str, float]] = {}
    for n in sizes if args.only - {"cli", "recovery"} else ():
        results[n] = measure(n, args)
        print(f"{n} goals: " + ", ".join(f"{k} {v:.3f}" for k, v in results[n].items()), flush=True)
    first = results[sizes[0]] if results else {}
    if first:
        print()
        print_table(sizes, results, bare=bare)
    if "recovery" in args.only:
        print()
        recovery([int(j) for j in args.journals.split(",")])


def print_table(sizes: list[int], results: dict[int, dict[str, float]], *, bare: float) -> None:
    """Every figure by size, with its ratio to the first size's."""
    first = results[sizes[0]]
    header = f"{'figure':<26}" + "".join(f"{n:>18,}" for n in sizes)
    print(header)
    for key in first:
        row = f"{key:<26}"
        for n in sizes:
            value = results[n][key]
            ratio = value / first[key] if first[key] else float("nan")
            row += f"{value:>10.3f} ({ratio:4.2f}x)"
        print(row)
    keys = [k for k in ("quota should-run (s)", "status warm (s)") if k in first]
    if not keys:
        return
    print()
    print(
        "against bare python measured beside them "
        "(targets: should-run within 2x, warm status within 3x):"
    )
    for key in keys:
        ratios = ", ".join(
            f"{n:,}: {results[n][key] / results[n].get(BARE, bare):.2f}x" for n in sizes
        )
        print(f"  {key:<26} {ratios}")


if __name__ == "__main__":
    main()
