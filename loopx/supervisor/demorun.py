"""`loopx demo`: the main job on an embedded default.

A fresh runtime root, four goals served by the built-in demo host (two that
finish, one that asks a human, one throttled by its compute quota), a headless
fleet until idle, then the status table, the report and what to try next.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from loopx.batch.report import BatchReport, Outcome
from loopx.model import utcnow
from loopx.registry.goalrecords import HostKind
from loopx.registry.plan import BatchPlan, PlanGoal
from loopx.registry.quota_policy import QuotaPolicy
from loopx.root import Layout
from loopx.storage.dirs import ensure_dir
from loopx.storage.files import atomic_write_bytes
from loopx.supervisor.batch import BatchConfig, BatchRun, Progress, register_plan, write_report

QUESTION = "Which database should the service use?"

DEMO_PLAN = BatchPlan(
    goals=[
        PlanGoal(
            id="count-to-three",
            objective="Advance a counter file to 3, one step per turn.",
            host_kind=HostKind.DEMO,
            priority=2,
        ),
        PlanGoal(
            id="count-to-five",
            objective="Advance a counter file to 5, one step per turn.",
            host_kind=HostKind.DEMO,
            host=["--steps", "5"],
            priority=1,
        ),
        PlanGoal(
            id="ask-a-human",
            objective="Count to 2, but only after a human picks the database.",
            host_kind=HostKind.DEMO,
            host=["--steps", "2", "--ask", QUESTION],
        ),
        PlanGoal(
            id="throttled",
            objective="Count to 10 on a compute share so small that one turn spends the day's quota.",
            host_kind=HostKind.DEMO,
            host=["--steps", "10"],
            quota=QuotaPolicy(compute=0.000001, window_hours=24),
        ),
    ]
)

EXPECTED = {
    "count-to-three": Outcome.COMPLETED,
    "count-to-five": Outcome.COMPLETED,
    "ask-a-human": Outcome.NEEDS_HUMAN,
    "throttled": Outcome.UNFINISHED,
}


@dataclass(frozen=True, slots=True)
class DemoResult:
    """Where the demo ran and how it ended."""

    home: Path
    plan_path: Path
    report_dir: Path
    report: BatchReport

    @property
    def as_designed(self) -> bool:
        """Every demo goal ended the way the demo means it to."""
        got = {g.goal_id: g.outcome for g in self.report.goals}
        return got == EXPECTED


def demo_home(root: Path | None) -> tuple[Path, Path]:
    """The demo's directory (plan, work directories, report) and its runtime root.

    The directory is always a fresh temporary one: with ``--root DIR`` the demo's
    files used to land in DIR's parent, among the user's own. The root is
    ``--root`` or ``<directory>/root``.
    """
    home = Path(tempfile.mkdtemp(prefix="loopx-demo-"))
    return home, root if root is not None else home / "root"


def run_demo(
    layout: Layout, home: Path, *, agents: int, show: Callable[[Progress], None]
) -> DemoResult:
    """Write the demo plan beside the root, register it, and run a headless fleet until idle."""
    plan_path = ensure_dir(home) / "demo-plan.json"
    if not plan_path.exists():
        atomic_write_bytes(
            plan_path, DEMO_PLAN.model_dump_json(indent=2, exclude_defaults=True).encode()
        )
    goal_ids = register_plan(layout, DEMO_PLAN, home, now=utcnow())
    batch = BatchRun(layout, goal_ids, BatchConfig(agents=agents, max_wall_s=300), show)
    report = batch.run()
    report_dir = home / "report"
    write_report(report, report_dir)
    return DemoResult(home=home, plan_path=plan_path, report_dir=report_dir, report=report)


def next_steps(result: DemoResult, root: Path) -> list[str]:
    """The commands a newcomer should try next, with this demo's paths filled in."""
    r = f"loopx --root {root}"
    return [
        f"{r} status                      # who must act next, per goal",
        f'{r} gate resolve ask-a-human --answer "PostgreSQL"',
        (
            f"{r} batch run {result.plan_path}   # resumes: ask-a-human finishes; exit 1 "
            "while throttled still waits for its quota"
        ),
        f"{r} quota show throttled          # why the throttled goal waits",
        f"{r} goal show count-to-three",
        f"{r} supervisor run --agents 2 --visible tmux   # a fleet you can watch",
    ]


__all__ = ["DEMO_PLAN", "DemoResult", "Progress", "demo_home", "next_steps", "run_demo"]
