"""``root.fleet``: `loopx supervisor start|stop|status|scale`, and a fleet run until idle."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from loopx.batch.plan import load_plan
from loopx.batch.report import BatchReport
from loopx.errors import UsageError
from loopx.fleet import ScaleResult, SupervisorStarted, SupervisorStatus, SupervisorStopped
from loopx.model import utcnow
from loopx.registry.catalog import load_registry
from loopx.registry.model import GoalStatus
from loopx.root import Layout

if TYPE_CHECKING:
    import threading

    from loopx.supervisor.batch import Progress


def _ignore(_progress: Progress) -> None:
    """The default progress display: none."""


@dataclass(frozen=True, slots=True)
class Fleet:
    """The agent fleet of one root."""

    layout: Layout

    def run_until_idle(
        self,
        goal_ids: Sequence[str] | None = None,
        *,
        agents: int = 2,
        max_wall_s: float | None = None,
        idle_horizon_s: float = 60.0,
        progress: Callable[[Progress], None] = _ignore,
        stop: threading.Event | None = None,
    ) -> BatchReport:
        """Run a fleet of ``agents`` until no goal can progress; report on ``goal_ids``.

        Blocks the calling thread; the supervisor runs as a child process (it
        owns its signals, so this works from any thread), killed if this call
        is interrupted. ``goal_ids`` defaults to every goal not archived. Setting
        ``stop`` (from another thread or a signal handler) stops the fleet
        gracefully; the report then covers what was done.

        Raises:
            UsageError: ``agents`` is below 1.
            BatchError: the fleet could not run (e.g. a supervisor already holds the root).
        """
        from loopx.supervisor.batch import BatchConfig, BatchRun  # noqa: PLC0415 - heavy

        if agents < 1:
            raise UsageError(f"--agents must be at least 1, got {agents}", hint="pass --agents N")
        if goal_ids is None:
            goals = load_registry(self.layout).goals.values()
            goal_ids = [g.id for g in goals if g.status is not GoalStatus.ARCHIVED]
        config = BatchConfig(agents=agents, max_wall_s=max_wall_s, idle_horizon_s=idle_horizon_s)
        return BatchRun(self.layout, list(goal_ids), config, progress, stop).run()

    def run_plan(
        self,
        plan: str | os.PathLike[str],
        *,
        agents: int = 2,
        report_dir: str | os.PathLike[str] | None = None,
        max_wall_s: float | None = None,
        idle_horizon_s: float = 60.0,
        progress: Callable[[Progress], None] = _ignore,
        stop: threading.Event | None = None,
        now: datetime | None = None,
    ) -> BatchReport:
        """`loopx batch run`: register a plan's goals, run until idle, write and return the report.

        The report goes to :meth:`report_dir` (``report.json`` and ``report.md``).

        Raises:
            PlanError: the plan is malformed (nothing is registered then).
            BatchError: the fleet could not run.
        """
        from loopx.supervisor.batch import register_plan, write_report  # noqa: PLC0415 - heavy

        if agents < 1:
            raise UsageError(f"--agents must be at least 1, got {agents}", hint="pass --agents N")
        plan_path = Path(plan).resolve()
        loaded = load_plan(plan_path)
        goal_ids = register_plan(self.layout, loaded, plan_path.parent, now=now or utcnow())
        report = self.run_until_idle(
            goal_ids,
            agents=agents,
            max_wall_s=max_wall_s,
            idle_horizon_s=idle_horizon_s,
            progress=progress,
            stop=stop,
        )
        write_report(report, self.report_dir(report, report_dir))
        return report

    def report_dir(
        self, report: BatchReport, report_dir: str | os.PathLike[str] | None = None
    ) -> Path:
        """Where :meth:`run_plan` writes ``report``: ``report_dir``, else ``<root>/reports/batch-<UTC time>``."""
        from loopx.supervisor.batch import default_report_dir  # noqa: PLC0415 - heavy

        if report_dir is not None:
            return Path(report_dir)
        return default_report_dir(self.layout, report.generated_at)

    def start(
        self,
        *,
        agents: int = 1,
        until_idle: bool = False,
        stop_grace_s: float = 30.0,
        idle_horizon_s: float = 60.0,
        agent_max_turns: int | None = None,
        args: Sequence[str] = (),
    ) -> SupervisorStarted:
        """`loopx supervisor start`: run the supervisor in the background (logs/supervisor.log).

        ``args`` are further `loopx supervisor run` options, as on the command line.

        Raises:
            SupervisorStartError: it did not come up (its log's tail is in the message).
        """
        from loopx.supervisor.control import start_detached  # noqa: PLC0415 - heavy

        argv = ["--agents", str(agents), "--stop-grace-seconds", str(stop_grace_s)]
        argv += ["--idle-horizon-seconds", str(idle_horizon_s)]
        if until_idle:
            argv.append("--until-idle")
        if agent_max_turns is not None:
            argv += ["--agent-max-turns", str(agent_max_turns)]
        return start_detached(self.layout, [*argv, *args])

    def stop(self, *, timeout_s: float | None = None, force: bool = False) -> SupervisorStopped:
        """`loopx supervisor stop`: stop the running supervisor and its whole fleet."""
        from loopx.supervisor.control import stop  # noqa: PLC0415 - heavy

        return stop(self.layout, timeout_s=timeout_s, force=force)

    def status(self) -> SupervisorStatus:
        """`loopx supervisor status`: the supervisor, its agents and crash loops."""
        from loopx.supervisor.control import status_document  # noqa: PLC0415 - heavy

        return status_document(self.layout)

    def scale(self, agents: int) -> ScaleResult:
        """`loopx supervisor scale N`: ask the running supervisor for ``agents`` agents."""
        from loopx.supervisor.control import scale  # noqa: PLC0415 - heavy

        if agents < 0:
            raise UsageError(f"agent count must be 0 or more, got {agents}", hint="pass N >= 0")
        return scale(self.layout, agents)
