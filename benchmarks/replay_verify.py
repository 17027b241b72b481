"""``loopx replay GOAL --verify`` of a goal with many kept journals, next to another revision's.

    python benchmarks/replay_verify.py --journals 200 --baseline DIR

Makes a root with one goal served by the shell one-liner host (the retention
benchmark's), runs ``--journals`` turns in process, then times the real CLI
``loopx replay g0 --verify`` as a whole process, ``--passes`` times, and with
``--baseline`` (a checkout of another revision, e.g. ``git archive main | tar -x -C DIR``)
the same command with that revision's ``loopx`` first on ``PYTHONPATH``, the two
in turn so a drift of the machine's speed hits both. Prints each one's median
and lowest wall time and median CPU time (user + system), the ratios, and
checks first that both say the same (exit code and ``--json`` report).
"""

from __future__ import annotations

import argparse
import compileall
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _fleet import ENV, SH_SCRIPT, compile_package

from loopx.agents.turn import TurnConfig, run_one_turn
from loopx.log import configure_logging
from loopx.model import utcnow
from loopx.registry.goalrecords import HostKind, HostSpec
from loopx.registry.goals import GoalChanges, add_goal
from loopx.root import Layout, ResolvedRoot, RootSource, open_root


def make_goal(base: Path, journals: int) -> Layout:
    """A root whose goal ``g0`` has ``journals`` committed turns (no gc: every journal kept)."""
    layout = open_root(
        ResolvedRoot(base / "root", base / "root/registry.json", RootSource.FLAG), create=True
    )
    (base / "w").mkdir()
    add_goal(
        layout,
        "g0",
        GoalChanges(
            objective="bench",
            workdir=str(base / "w"),
            host=HostSpec(kind=HostKind.COMMAND, argv=["sh", "-c", SH_SCRIPT]),
        ),
        update=False,
        default_workdir=base / "w",
        now=utcnow(),
    )
    config = TurnConfig()
    for _ in range(journals):
        report = run_one_turn(layout, "g0", agent_id="bench", config=config)
        assert report is not None and report.status == "committed", report
    return layout


def replay_once(
    root: Path, checkout: Path, *, json_out: bool = False
) -> tuple[float, float, int, str]:
    """One ``loopx replay g0 --verify`` process of ``checkout``'s loopx.

    Returns its wall and CPU (user + system) seconds, exit code and stdout.

    ``python -m`` puts the working directory first on ``sys.path``, so the process runs
    in the checkout, which is also on ``PYTHONPATH``.
    """
    env = {**ENV, "PYTHONPATH": str(checkout)}
    argv = [sys.executable, "-m", "loopx", "--root", str(root), "replay", "g0", "--verify"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(
        [*argv, *(["--json"] if json_out else [])],
        env=env,
        cwd=checkout,
        capture_output=True,
        check=False,
    )
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return wall, cpu, done.returncode, done.stdout.decode()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--journals", type=int, default=200)
    parser.add_argument("--passes", type=int, default=5)
    parser.add_argument("--baseline", type=Path, help="a checkout of the revision to compare with")
    args = parser.parse_args()
    configure_logging(level="warning")
    compile_package()
    layout = make_goal(Path(tempfile.mkdtemp(prefix="loopx-replay-bench-")), args.journals)
    root = layout.root
    runs = {"this checkout": Path(__file__).resolve().parent.parent}
    if args.baseline is not None:
        runs["baseline"] = args.baseline.resolve()
        compileall.compile_dir(args.baseline / "loopx", quiet=1)  # as compile_package does
    reports = {}
    for name, path in runs.items():
        _, _, code, out = replay_once(root, path, json_out=True)  # also the warm-up
        doc = json.loads(out)
        reports[name] = (code, doc)
        print(
            f"{name}: exit {code}, {len(doc['journals'])} journals, clean: {not doc['differences']}"
        )
    if len({json.dumps(r, sort_keys=True) for r in reports.values()}) != 1:
        print("the two revisions' reports differ")
        sys.exit(1)
    times: dict[str, list[float]] = {name: [] for name in runs}
    cpu: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(args.passes):
        for name, path in runs.items():
            wall, used, _, _ = replay_once(root, path)
            times[name].append(wall)
            cpu[name].append(used)
    print(f"root {root}; goal g0 with {args.journals} journals; {args.passes} passes each")
    for name, seconds in times.items():
        print(
            f"{name:>14}: median {statistics.median(seconds) * 1e3:.0f} ms, "
            f"lowest {min(seconds) * 1e3:.0f} ms; CPU median "
            f"{statistics.median(cpu[name]) * 1e3:.0f} ms"
        )
    if args.baseline is not None:
        ratio = statistics.median(times["baseline"]) / statistics.median(times["this checkout"])
        used = statistics.median(cpu["baseline"]) / statistics.median(cpu["this checkout"])
        print(f"baseline / this checkout (medians): wall {ratio:.1f}x, CPU {used:.1f}x")


if __name__ == "__main__":
    main()
