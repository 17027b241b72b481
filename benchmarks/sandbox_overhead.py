"""What a sandbox costs a turn: a sandboxed turn next to an unsandboxed one, side by side.

    /work/venv/bin/python benchmarks/sandbox_overhead.py [--turns 40]

Two goals on one root, each with the trivial command host ``/bin/echo``
printing a ``progress`` result: one plain, one with ``--sandbox bwrap``
(bubblewrap, the bridge inside it, the proxy outside on a Unix socket). Their
turns alternate (plain, sandboxed, plain, ...), each a whole in-process turn
(:func:`loopx.agents.turn.run_one_turn`), so both see the same machine at
the same moment. Printed: each side's median and 90th percentile, the median
of the pairwise differences, and the ratio of the medians; and each side's
CPU time per turn (this process's and its reaped children's, from
``getrusage``), which a loaded machine moves far less than wall time.

Target: a sandboxed turn costs at most 50 ms more than an unsandboxed one.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from loopx.agents.turn import TurnConfig, run_one_turn
from loopx.log import configure_logging
from loopx.model import utcnow
from loopx.registry.goalrecords import HostKind, HostSpec
from loopx.registry.goals import GoalChanges, add_goal
from loopx.root import Layout, ResolvedRoot, RootSource, open_root
from loopx.sandbox import SandboxSpec

HOST = ["/bin/echo", '{"schema_version": 1, "kind": "progress", "summary": "ok"}']
CONFIG = TurnConfig(lease_ttl_s=30, lease_grace_s=1, kill_grace_s=0.5)


def _goal(layout: Layout, goal_id: str, workdir: Path, *, sandbox: bool) -> None:
    workdir.mkdir()
    changes = GoalChanges(
        objective="echo",
        workdir=str(workdir),
        host=HostSpec(kind=HostKind.COMMAND, argv=HOST),
        quota={"compute": 1.0},
        sandbox=SandboxSpec() if sandbox else None,
    )
    add_goal(layout, goal_id, changes, update=False, default_workdir=workdir, now=utcnow())


def _cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _turn(layout: Layout, goal_id: str, cpu: list[float] | None = None) -> float:
    t0, c0 = time.perf_counter(), _cpu()
    report = run_one_turn(layout, goal_id, agent_id="bench", config=CONFIG)
    elapsed = time.perf_counter() - t0
    if cpu is not None:
        cpu.append(_cpu() - c0)
    if report is None or report.status != "committed":
        sys.exit(f"{goal_id}: the turn did not commit: {report}")
    return elapsed


def _p90(values: list[float]) -> float:
    return sorted(values)[int(0.9 * (len(values) - 1))]


def main() -> None:
    """Run the turns, print the table."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=40, help="turns per side")
    args = parser.parse_args()
    if shutil.which("bwrap") is None:
        sys.exit("bubblewrap is not installed (apt-get install bubblewrap)")
    configure_logging(level="error")
    with tempfile.TemporaryDirectory(prefix="loopx-sandbox-bench-") as tmp:
        base = Path(tmp)
        layout = open_root(
            ResolvedRoot(base / "root", base / "root" / "registry.json", RootSource.FLAG),
            create=True,
        )
        _goal(layout, "plain", base / "plain", sandbox=False)
        _goal(layout, "boxed", base / "boxed", sandbox=True)
        _turn(layout, "plain"), _turn(layout, "boxed")  # warm both paths
        plain, boxed, plain_cpu, boxed_cpu = [], [], [], []
        for _ in range(args.turns):
            plain.append(_turn(layout, "plain", plain_cpu))
            boxed.append(_turn(layout, "boxed", boxed_cpu))
    diffs = [b - p for p, b in zip(plain, boxed, strict=True)]
    ms = 1000.0
    print(f"turns per side: {args.turns}")
    print("| side | median | p90 |")
    print("| --- | --- | --- |")
    print(f"| unsandboxed | {statistics.median(plain) * ms:.1f} ms | {_p90(plain) * ms:.1f} ms |")
    print(f"| sandboxed | {statistics.median(boxed) * ms:.1f} ms | {_p90(boxed) * ms:.1f} ms |")
    extra = statistics.median(diffs) * ms
    ratio = statistics.median(boxed) / statistics.median(plain)
    print(f"sandbox cost per turn (median of pairs): {extra:.1f} ms; ratio {ratio:.2f}")
    print(f"target <= 50 ms: {'met' if extra <= 50 else 'NOT met'}")
    cpu_plain, cpu_boxed = statistics.median(plain_cpu) * ms, statistics.median(boxed_cpu) * ms
    print(f"CPU per turn: unsandboxed {cpu_plain:.1f} ms, sandboxed {cpu_boxed:.1f} ms")


if __name__ == "__main__":
    main()
