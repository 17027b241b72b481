"""What watching a host costs its agent: CPU per second of a host that only sleeps, beside the floor.

    /work/venv/bin/python benchmarks/host_watch.py [--seconds 4] [--idle 100] [--passes 3]

Target: while a host runs, its agent uses at most 1% of a core, however
many other processes the machine runs.

The host is ``sleep N`` (the agent's goal runs it as ``sh -c 'echo $$ >
pidfile; sleep N; <write a progress result>'``, so the benchmark knows when
it starts and the turn commits). Four
watchers of it, each measured over the host's life as CPU seconds per
second of wall time (the share of one core):

* ``floor``: ``subprocess.Popen`` and a blocking ``wait()``, nothing watched;
* ``psutil 50 ms``: the loop agents used before, a pidfd wait that wakes
  every 50 ms to sample the tree with psutil ``children(recursive=True)``
  (which reads the ``stat`` file of every process on the machine) and each
  process's CPU and memory;
* ``run_host``: :func:`loopx.agents.hostrun.run_host` as the turn calls it
  (a stop event, a lease tick), in this process (``getrusage``);
* ``agent``: a real agent process (``python -m loopx.agents run --once``)
  running one turn of that goal: the agent's and its guard's CPU (their
  CPU clocks) from the host's start (it wrote its pid) to 0.25 s before
  its end, so the turn's own work before and after the host is left out;
  this adds the heartbeat thread and the lease renewal (every 2 s here,
  ``LOOPX_LEASE_TTL_S=6``; every 10 s by default) to the watching.

The three in-process rows count the whole call, the spawn and the reaping
included.

Each row is the median of ``--passes``; the whole table is measured twice,
with the machine as it is, then with ``--idle`` more sleeping processes, to
show the cost no longer grows with what else the machine runs.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import select
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import psutil
from _fleet import ENV, SH_SCRIPT, init_root  # benchmarks/_fleet.py, next to this script

from loopx.agents.hostguard import stop_guard
from loopx.agents.hostlimits import Limits
from loopx.agents.hostrun import run_host

T = TypeVar("T")
# A lease renewed every 2 s (a third of its time to live) instead of every 10 s.
_LEASE_TTL_S = 6.0
_MARGIN_S = 0.25  # the agent is measured until this long before its host ends
TARGET = 0.01  # of a core
KEY = "bench-t000001-e1"


def _self_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _measured(watch: Callable[[], None]) -> float:
    """CPU seconds per wall second this process spent in ``watch``."""
    cpu, wall = _self_cpu(), time.monotonic()
    watch()
    return (_self_cpu() - cpu) / (time.monotonic() - wall)


def floor(seconds: float) -> float:
    def watch() -> None:
        subprocess.Popen(["sleep", str(seconds)], start_new_session=True).wait()

    return _measured(watch)


def psutil_50ms(seconds: float) -> float:
    """The previous sampling loop: every 50 ms, the whole tree by psutil's recursive scan."""

    def watch() -> None:
        proc = subprocess.Popen(["sleep", str(seconds)], start_new_session=True)
        root = psutil.Process(proc.pid)
        pidfd = os.pidfd_open(proc.pid)
        try:
            while not select.select([pidfd], [], [], 0.05)[0]:
                total = root.memory_info().rss
                for child in root.children(recursive=True):
                    with child.oneshot():
                        child.cpu_times()
                        total += child.memory_info().rss
                        child.ppid()
                        child.create_time()
        finally:
            os.close(pidfd)
        proc.wait()

    return _measured(watch)


def hostrun(seconds: float, workdir: Path) -> float:
    env = {**ENV, "LOOPX_TURN_KEY": KEY, "LOOPX_ROOT": str(workdir)}

    def watch() -> None:
        run = run_host(
            ["sleep", str(seconds)],
            stdin=b"{}",
            cwd=workdir,
            env=env,
            limits=Limits(timeout_s=seconds + 60),
            turn_key=KEY,
            loopx_root=str(workdir),
            stop=threading.Event(),
            tick=lambda: None,
            tick_every_s=10.0,
        )
        assert run.exit_code == 0, run

    return _measured(watch)


def agent(seconds: float, workdir: Path) -> float:
    """One turn of a real agent process: its CPU (and its guard's) over the host's life."""
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        root, pidfile = Path(tmp) / "root", Path(tmp) / "host.pid"
        script = f"echo $$ > {shlex.quote(str(pidfile))}; sleep {seconds}; {SH_SCRIPT}"
        init_root(root, Path(tmp) / "work", 1, ["--host", shlex.join(["sh", "-c", script])])
        argv = [sys.executable, "-m", "loopx.agents", "run", "--root", str(root)]
        proc = subprocess.Popen(
            [*argv, "--agent-id", "agent-1", "--once", "--log-level", "warning"],
            env={**ENV, "LOOPX_LEASE_TTL_S": str(_LEASE_TTL_S)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            _wait_for(lambda: _pid_in(pidfile), proc)
            watchers = [proc.pid, *_guard_of(proc.pid)]
            cpu, wall = _cpu_of(watchers), time.monotonic()
            # Up to just before the host's end: the turn's writes after it are not watching.
            time.sleep(seconds - _MARGIN_S)
            share = (_cpu_of(watchers) - cpu) / (time.monotonic() - wall)
            assert proc.wait(timeout=120) == 0, "the agent failed"
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return share


def _cpu_of(pids: list[int]) -> float:
    """CPU seconds of these processes, to the nanosecond.

    psutil's ``cpu_times()`` counts in clock ticks (10 ms: 0.25% of a core
    over a 4 s host); a process's CPU clock does not. Linux names another
    process's clock ``~pid << 3 | 2`` (CPUCLOCK_SCHED), as
    ``clock_getcpuclockid(3)`` would.
    """
    total = 0.0
    for pid in pids:
        with contextlib.suppress(OSError):
            total += time.clock_gettime(((~pid) << 3) | 2)
    return total


def _pid_in(path: Path) -> int | None:
    try:
        return int(path.read_text())
    except (OSError, ValueError):
        return None


def _guard_of(agent_pid: int) -> list[int]:
    kids = psutil.Process(agent_pid).children()
    return [p.pid for p in kids if "guard.py" in " ".join(p.cmdline())]


def _wait_for(probe: Callable[[], T | None], proc: subprocess.Popen[bytes]) -> T:
    """Poll ``probe`` every 5 ms until it gives a value; the agent must not exit first."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        value = probe()
        if value is not None and value is not False:
            return value
        if proc.poll() is not None:
            raise SystemExit(f"the agent exited ({proc.returncode}) before the host ran")
        time.sleep(0.005)
    raise SystemExit("the agent's host did not start or end within 120 s")


@contextmanager
def idle_processes(count: int) -> Iterator[None]:
    """``count`` more processes on the machine, sleeping, for the block."""
    procs = [
        subprocess.Popen(["sleep", "3600"], stdin=subprocess.DEVNULL, start_new_session=True)
        for _ in range(count)
    ]
    try:
        yield
    finally:
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.wait()


def table(seconds: float, passes: int, workdir: Path) -> dict[str, float]:
    rows: dict[str, Callable[[], float]] = {
        "floor (blocking wait)": lambda: floor(seconds),
        "psutil 50 ms (before)": lambda: psutil_50ms(seconds),
        "run_host (the turn's)": lambda: hostrun(seconds, workdir),
        "agent process, a turn": lambda: agent(seconds, workdir),
    }
    out = {}
    for name, measure in rows.items():
        out[name] = statistics.median(measure() for _ in range(passes))
    return out


def report(title: str, shares: dict[str, float]) -> None:
    processes = len(psutil.pids())
    print(f"{title} ({processes} processes on the machine)")
    print(f"  {'watcher':<24} {'ms CPU/s':>9} {'% of a core':>12} {'vs psutil 50 ms':>16}")
    before = shares["psutil 50 ms (before)"]
    for name, share in shares.items():
        ratio = f"{share / before:.3f}x" if before else "-"
        print(f"  {name:<24} {share * 1000:>9.2f} {share * 100:>11.3f}% {ratio:>16}")
    worst = max(shares["run_host (the turn's)"], shares["agent process, a turn"])
    verdict = "ok" if worst <= TARGET else "OVER"
    print(f"  watching: at most {worst * 100:.3f}% of a core (target <= 1%): {verdict}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=4.0, help="how long the host sleeps")
    parser.add_argument("--idle", type=int, default=100, help="extra idle processes")
    parser.add_argument("--passes", type=int, default=3, help="runs per row (median)")
    args = parser.parse_args()
    print(f"host: sleep {args.seconds:g} s; median of {args.passes}; {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        try:
            report("as is", table(args.seconds, args.passes, workdir))
            with idle_processes(args.idle):
                report(
                    f"with {args.idle} more idle processes",
                    table(args.seconds, args.passes, workdir),
                )
        finally:
            stop_guard()


if __name__ == "__main__":
    main()
