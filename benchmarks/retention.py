"""Retention under load: the root's size and file count level off while a fleet turns for ever.

A real fleet (``loopx supervisor run``) turns goals served by the cheapest
host (a shell one-liner) while this script runs ``loopx gc`` passes (the same
``collect`` the supervisor's duty calls) with the default policy. The turns of
a benchmark all happen within minutes, so the passes judge age on a clock a
fortnight ahead: ``keep_days`` then never binds and ``keep_turns`` (200 a
goal) is what keeps the level, as it would for goals turning every few minutes.

Two more bounds fill at their own pace: a goal's quota ledger keeps every
line inside its quota window (24 h by default), and each log file keeps up to
six files of ``LOOPX_LOG_MAX_BYTES`` (10 MiB). A run that packs months of
turns into an hour packs those too: ``--quota-window-hours`` and
``--log-max-bytes`` scale them down by about as much, so that every bound is
reached within the first 20,000 turns (the defaults keep the product's values).

Prints, every ``--sample-every`` turns: turns so far, the root's size and file
count, and the fleet's turns/s since the previous sample; then gc's cost per
turn folded, and the cold ``status --json`` and warm ``quota should-run``
times at the start and the end (the reference each end figure is compared with); each
``quota should-run`` figure with how many of its 3 runs replayed the stored decision
and a bare Python start timed beside it, at the start, at the end with the fleet still
running, and after it stopped.

    python benchmarks/retention.py --goals 100 --turns 100000 --agents 4
    python benchmarks/retention.py --goals 100 --turns 100000 --agents 3 \
        --quota-window-hours 0.05 --log-max-bytes 1000000
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

from _fleet import ENV, SH_SCRIPT, compile_package, init_root, start_fleet, stop_fleet
from _timing import lowest

from loopx.api import configure_logging
from loopx.model import utcnow
from loopx.quota.warmanswer import memo_path
from loopx.retention.gc import collect
from loopx.retention.space import measure
from loopx.root import Layout

AHEAD = timedelta(days=14)  # the passes' clock: past keep_days (7) for every turn


def total_turns(root: Path) -> int:
    """Turns committed on the root: each goal's state names its last applied turn."""
    total = 0
    for state in (root / "goals").glob("*/state.json"):
        try:
            total += json.loads(state.read_bytes())["turn_seq"]
        except (OSError, ValueError, KeyError):
            continue
    return total


def _bytes(paths: list[Path]) -> float:
    total = 0
    for path in paths:
        try:
            total += path.stat().st_size
        except OSError:
            continue
    return total / 2**20


def breakdown(root: Path) -> tuple[float, float, float]:
    """MB under ``goals/``, of it the quota ledgers and checkpoints, and under ``logs/``."""
    goals = _bytes([p for p in (root / "goals").rglob("*") if p.is_file()])
    ledger = _bytes(
        [*(root / "goals").glob("*/quota.jsonl"), *(root / "goals").glob("*/checkpoint.json")]
    )
    logs = _bytes([p for p in (root / "logs").rglob("*") if p.is_file()])
    return goals, ledger, logs


def cli_time(root: Path, *args: str) -> float:
    argv = [sys.executable, "-m", "loopx", "--root", str(root), *args]

    def run() -> None:
        subprocess.run(argv, env=ENV, capture_output=True, check=False)

    return lowest(3, run)


def bare_python() -> float:
    """Best of 3 bare Python starts: the reference a warm answer is judged against under this load."""
    return lowest(3, lambda: subprocess.run([sys.executable, "-c", "pass"], env=ENV, check=False))


def should_run_time(root: Path, goal: str = "g0") -> tuple[float, int, float]:
    """Best of 3 ``quota should-run GOAL``, how many of the 3 replayed the stored decision, bare Python.

    A run that left the stored decision's ``computed_at`` as it was replayed it
    (a hit); a miss decides again and stores a new one. Bare Python is timed
    right after, so a figure taken under another load can still be compared.
    """
    path = memo_path(Layout.at(root), goal, as_json=False)

    def stamp() -> float | None:
        try:
            with open(path, "rb") as f:
                return float(json.loads(f.readline())["computed_at"])
        except (OSError, ValueError, KeyError):
            return None

    argv = [sys.executable, "-m", "loopx", "--root", str(root), "quota", "should-run", goal]
    hits = 0

    def run() -> None:
        nonlocal hits
        before = stamp()
        subprocess.run(argv, env=ENV, capture_output=True, check=False)
        hits += before is not None and stamp() == before

    return lowest(3, run), hits, bare_python()


def _should_figure(label: str, figure: tuple[float, int, float]) -> str:
    best, hits, bare = figure
    return f"{label} {best * 1e3:.0f} ms ({hits}/3 hits, bare Python {bare * 1e3:.0f} ms, {best / bare:.2f}x)"


def main() -> None:  # noqa: PLR0915 - one run read top to bottom
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--goals", type=int, default=100)
    parser.add_argument("--turns", type=int, default=100_000)
    parser.add_argument("--agents", type=int, default=4)
    parser.add_argument("--sample-every", type=int, default=5_000)
    parser.add_argument("--gc-every-s", type=float, default=5.0)
    parser.add_argument("--quota-window-hours", type=float, default=24.0)
    parser.add_argument("--log-max-bytes", type=int, default=None)
    parser.add_argument("--no-verify", action="store_true", help="skip replay --verify at the end")
    args = parser.parse_args()
    configure_logging(level="warning")
    compile_package()
    base = Path(tempfile.mkdtemp(prefix="loopx-retention-"))
    root = base / "root"
    host = ["--host", f"sh -c '{SH_SCRIPT}'"]
    init_root(
        root,
        base / "work",
        args.goals,
        [*host, "--quota-window-hours", str(args.quota_window_hours)],
    )
    layout = Layout.at(root)
    env = dict(ENV)
    if args.log_max_bytes is not None:
        env["LOOPX_LOG_MAX_BYTES"] = str(args.log_max_bytes)
    proc, _sup = start_fleet(root, args.agents, "--log-level", "warning", env=env)
    print(
        f"root {root}; {args.goals} goals, {args.agents} agents, default retention policy, "
        f"quota window {args.quota_window_hours} h, log files of "
        f"{args.log_max_bytes or 'the default'} bytes"
    )
    print(
        f"{'turns':>8} {'root MB':>8} {'files':>7} {'turns/s':>8} {'goals MB':>9} "
        f"{'ledger MB':>9} {'logs MB':>8}"
    )
    samples: list[tuple[int, float, int, float]] = []
    gc_seconds = 0.0
    folded = 0
    figures: dict[str, tuple[float, float]] = {}
    should: dict[str, tuple[float, int, float]] = {}
    next_sample = args.sample_every
    last_turns, last_t = 0, time.monotonic()
    next_gc = time.monotonic()
    try:
        while True:
            time.sleep(0.5)
            if time.monotonic() >= next_gc:
                started = time.perf_counter()
                folded += collect(layout, now=utcnow() + AHEAD).folded
                gc_seconds += time.perf_counter() - started
                next_gc = time.monotonic() + args.gc_every_s
            done = total_turns(root)
            if done < next_sample:
                continue
            now = time.monotonic()
            reading = measure(layout, now=utcnow())
            rate = (done - last_turns) / (now - last_t)
            samples.append((done, reading.root_bytes / 2**20, reading.root_files, rate))
            goals_mb, ledger_mb, logs_mb = breakdown(root)
            print(
                f"{done:>8} {samples[-1][1]:>8.1f} {reading.root_files:>7} {rate:>8.1f} "
                f"{goals_mb:>9.1f} {ledger_mb:>9.1f} {logs_mb:>8.1f}",
                flush=True,
            )
            if len(samples) == 1:
                figures["status_start"] = (cli_time(root, "status", "--json", "--clear-cache"), 0.0)
                should["start"] = should_run_time(root)
            last_turns, last_t = done, time.monotonic()
            next_sample += args.sample_every
            if done >= args.turns:
                break
        should["end, fleet running"] = should_run_time(root)
    finally:
        stop_fleet(proc)
    status_end = cli_time(root, "status", "--json", "--clear-cache")
    should["end, fleet stopped"] = should_run_time(root)
    level = next((s for s in samples if s[0] >= 20_000), samples[0])
    end = samples[-1]
    print(
        f"\nlevel at {level[0]} turns: {level[1]:.1f} MB, {level[2]} files; "
        f"at {end[0]}: {end[1]:.1f} MB ({end[1] / level[1]:.2f}x), {end[2]} files "
        f"({end[2] / level[2]:.2f}x)"
    )
    rates = [s[3] for s in samples]
    print(
        f"turns/s: first sample {rates[0]:.1f}, last {rates[-1]:.1f} ({rates[-1] / rates[0]:.2f}x)"
    )
    per_turn = gc_seconds / folded * 1e3 if folded else float("nan")
    print(f"gc: {folded} turns folded in {gc_seconds:.1f} s: {per_turn:.2f} ms per turn folded")
    start_status = figures["status_start"][0]
    print(
        f"cold status --json: start {start_status * 1e3:.0f} ms, end {status_end * 1e3:.0f} ms "
        f"({status_end / start_status:.2f}x)"
    )
    # Each against bare Python measured beside it: the machine's load moves between them.
    print("warm quota should-run g0: " + "; ".join(_should_figure(k, v) for k, v in should.items()))
    if args.no_verify:
        return
    verify = [
        subprocess.run(
            [sys.executable, "-m", "loopx", "--root", str(root), "replay", f"g{i}", "--verify"],
            env=ENV,
            capture_output=True,
            check=False,
        ).returncode
        for i in range(args.goals)
    ]
    print(f"replay --verify clean on {verify.count(0)} of {args.goals} goals")


if __name__ == "__main__":
    main()
