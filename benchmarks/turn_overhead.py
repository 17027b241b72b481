"""Control-plane cost of one turn next to the physical floor, measured in the same run.

    /work/venv/bin/python benchmarks/turn_overhead.py [--turns 200]

A turn: claim, quota decision, journal create, host spawn + wait, journal
rewrite, run log (.json + .md), history line, spend line, terminal journal,
release; the trivial host is ``/bin/echo`` printing a `progress` result.
The floor: one spawn of the same host (pipes, own session, wait) plus the four
atomic writes with fsync any crash-safe turn needs (intent, outcome, writeback,
commit). Both medians and their ratio are printed; the goal is ratio <= 2.5.
Also printed: fsyncs per turn next to the floor's; the CPU time of this process
per turn and per floor (``time.process_time``: the host's own CPU is not in it),
which a busy disk does not move the way it moves wall time; and the part of the turn
spent in the root-tamper check (``loopx.turn.tamper``), whose cost grows with the
goal's history, with the ratio the turn has without it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from _echoroot import HOST, echo_root

from loopx.agents.turn import TurnConfig, run_one_turn
from loopx.log import configure_logging
from loopx.storage.files import atomic_write_bytes
from loopx.turn.tamper import GoalFingerprint

# Count the fsyncs each path makes (files.py calls os.fsync through the module).
FSYNCS = [0]
_real_fsync = os.fsync


def _counting_fsync(fd: int) -> None:
    FSYNCS[0] += 1
    _real_fsync(fd)


os.fsync = _counting_fsync

# Time the root-tamper check (loopx.turn.tamper): it stats every finished journal and
# run log of the goal before and after the host, so its cost grows with the
# goal's history; it is reported apart from the rest of the turn.
TAMPER_S = [0.0]
_real_take = GoalFingerprint.take.__func__  # type: ignore[attr-defined]
_real_changed = GoalFingerprint.changed


def _timed_take(cls: type[GoalFingerprint], *args: object, **kwargs: object) -> GoalFingerprint:
    t0 = time.perf_counter()
    try:
        return _real_take(cls, *args, **kwargs)  # type: ignore[no-any-return]
    finally:
        TAMPER_S[0] += time.perf_counter() - t0


def _timed_changed(self: GoalFingerprint, *args: object, **kwargs: object) -> list[str]:
    t0 = time.perf_counter()
    try:
        return _real_changed(self, *args, **kwargs)  # type: ignore[arg-type]
    finally:
        TAMPER_S[0] += time.perf_counter() - t0


GoalFingerprint.take = classmethod(_timed_take)  # type: ignore[assignment,method-assign]
GoalFingerprint.changed = _timed_changed  # type: ignore[method-assign]


def floor_once(directory: Path) -> tuple[float, float]:
    """Wall and CPU seconds of one floor: a spawn of the host and four fsync'd atomic writes."""
    t0, c0 = time.perf_counter(), time.process_time()
    atomic_write_bytes(directory / "intent.json", b'{"intent": 1}' * 20)
    proc = subprocess.Popen(
        HOST,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    proc.communicate(b"{}")
    atomic_write_bytes(directory / "outcome.json", b'{"outcome": 1}' * 20)
    atomic_write_bytes(directory / "writeback.json", b'{"writeback": 1}' * 20)
    atomic_write_bytes(directory / "commit.json", b'{"commit": 1}' * 20)
    return time.perf_counter() - t0, time.process_time() - c0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=200)
    args = parser.parse_args()
    configure_logging(level="warning")
    base = Path(tempfile.mkdtemp(prefix="loopx-bench-"))
    layout = echo_root(base, "bench", objective="benchmark")
    config = TurnConfig()
    turn_s, host_s, floor_s, turn_cpu, floor_cpu = [], [], [], [], []
    floor_dir = base / "floor"
    floor_dir.mkdir()
    for _ in range(10):  # warm up both paths
        run_one_turn(layout, "bench", agent_id="bench", config=config)
        floor_once(floor_dir)
    turn_fsyncs = floor_fsyncs = 0
    tamper_s: list[float] = []
    for _ in range(args.turns):
        f0, g0 = FSYNCS[0], TAMPER_S[0]
        t0, c0 = time.perf_counter(), time.process_time()
        report = run_one_turn(layout, "bench", agent_id="bench", config=config)
        turn_s.append(time.perf_counter() - t0)
        turn_cpu.append(time.process_time() - c0)
        tamper_s.append(TAMPER_S[0] - g0)
        f1 = FSYNCS[0]
        assert report is not None and report.status == "committed", report
        host_s.append(report.usage.wall_s)
        wall, cpu = floor_once(floor_dir)
        floor_s.append(wall)
        floor_cpu.append(cpu)
        turn_fsyncs += f1 - f0
        floor_fsyncs += FSYNCS[0] - f1
    turn = statistics.median(turn_s) * 1000
    host = statistics.median(host_s) * 1000
    floor = statistics.median(floor_s) * 1000
    print(f"turns: {args.turns}  host: {HOST[0]}")
    print(
        f"turn (whole)        median {turn:7.2f} ms   p90 {sorted(turn_s)[int(len(turn_s) * 0.9)] * 1000:7.2f} ms"
    )
    print(f"  host wall (spawn->exit) median {host:7.2f} ms")
    print(f"  control plane (turn - host wall) median {turn - host:7.2f} ms")
    print(f"floor (spawn + 4 fsync'd atomic writes) median {floor:7.2f} ms")
    print(
        f"fsyncs per turn: {turn_fsyncs / args.turns:.1f}   floor: {floor_fsyncs / args.turns:.1f}"
    )
    untampered = statistics.median(t - g for t, g in zip(turn_s, tamper_s, strict=True)) * 1000
    print(
        f"  tamper fingerprint (loopx.turn.tamper, constant in history) median "
        f"{statistics.median(tamper_s) * 1000:7.2f} ms   at the last turn "
        f"{tamper_s[-1] * 1000:7.2f} ms"
    )
    print(
        f"turn without the tamper fingerprint median {untampered:7.2f} ms   "
        f"ratio to floor {untampered / floor:.2f}"
    )
    cpu, cpu_floor = statistics.median(turn_cpu) * 1000, statistics.median(floor_cpu) * 1000
    print(
        f"CPU of this process per turn median {cpu:7.2f} ms   per floor {cpu_floor:7.2f} ms   "
        f"ratio {cpu / cpu_floor:.2f}"
    )
    print(f"load average: {os.getloadavg()[0]:.2f}")
    print(f"ratio turn/floor: {turn / floor:.2f}   (goal <= 2.5)")


if __name__ == "__main__":
    main()
