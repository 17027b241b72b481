"""``root.fleet``: `loopx supervisor run|start|stop|status|scale|attach`, `agent run`, `batch run`."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn, Unpack

from loopx.api._fleetrun import FleetOptions, fleet_config, run_argv, run_child
from loopx.batch.report import BatchReport, RunSummary
from loopx.errors import HostUnsupportedError, UsageError
from loopx.fleet import (
    AgentConfig,
    ScaleResult,
    SupervisorStarted,
    SupervisorStatus,
    SupervisorStopped,
)
from loopx.ids import validate_goal_id
from loopx.model import utcnow
from loopx.registry.catalog import load_registry
from loopx.registry.checks import GoalSetupError, check_program, check_workdir
from loopx.registry.goalrecords import GoalStatus, HostKind
from loopx.registry.plan import BatchPlan, PlanError, load_plan
from loopx.root import Layout

if TYPE_CHECKING:
    import threading

    from loopx.supervisor.batch import Progress
    from loopx.supervisor.config import SupervisorConfig


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
        max_failures: Mapping[str, int] | None = None,
    ) -> BatchReport:
        """Run a fleet of ``agents`` until no goal can progress; report on ``goal_ids``.

        Blocks the calling thread; the supervisor runs as a child process (it
        owns its signals, so this works from any thread), killed if this call
        is interrupted. ``goal_ids`` defaults to every goal not archived. Setting
        ``stop`` (from another thread or a signal handler) stops the fleet
        gracefully; the report then covers what was done. A goal named in
        ``max_failures`` whose failed turns in a row reach its number is paused
        at once and reported ``failed``.

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
        config = BatchConfig(
            agents=agents,
            max_wall_s=max_wall_s,
            idle_horizon_s=idle_horizon_s,
            max_failures=dict(max_failures or {}),
        )
        return BatchRun(self.layout, list(goal_ids), config, progress, stop).run()

    @staticmethod
    def check_plan(plan: str | os.PathLike[str]) -> BatchPlan:
        """Read and check a batch plan as `loopx batch run` does first; registers nothing.

        Every goal must be valid, its host kind one an installed adapter
        runs, and every command host's and done-check's program found: a typo
        is refused here, before anything is registered or run.

        Raises:
            PlanError: the plan is malformed, names a host kind no adapter runs, a
                missing workdir, or a program that is not found or not executable.
        """
        from loopx.agents.hosts.plugins import require_kind  # noqa: PLC0415 - the adapters are heavy

        plan_path = Path(plan).resolve()
        loaded = load_plan(plan_path)
        for i, entry in enumerate(loaded.goals):
            where = f"goals[{i}] (id {entry.id!r})"
            workdir = entry.workdir_path(plan_path.parent)
            try:
                require_kind(entry.host_spec().kind)
            except HostUnsupportedError as e:
                raise PlanError(plan_path, f"{where}.host_kind", e.message) from e
            try:
                # A named workdir must exist, as for `goal add`: a typo would run the
                # agent in an empty folder and come back green. The default
                # work/<id> beside the plan is LoopX's own, made at registration.
                if entry.workdir is not None:
                    check_workdir(workdir)
                host = entry.host_spec()
                if host.kind == HostKind.COMMAND:
                    check_program(host.argv[0], workdir)
            except GoalSetupError as e:
                field = "workdir" if entry.workdir is not None and "workdir" in e.what else "host"
                raise PlanError(plan_path, f"{where}.{field}", f"{e.what}: {e.problem}") from e
            check = entry.done_check_spec()
            if check is not None and check.argv:
                try:
                    check_program(check.argv[0], workdir, role="done-check")
                except GoalSetupError as e:
                    problem = f"{e.what}: {e.problem}"
                    raise PlanError(plan_path, f"{where}.done_check", problem) from e
        return loaded

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
        fail_fast: bool = False,
        now: datetime | None = None,
    ) -> BatchReport:
        """`loopx batch run`: register a plan's goals, run until idle, write and return the report.

        The report goes to :meth:`report_dir` (``report.json`` and ``report.md``).
        A goal's ``max_failures`` (``fail_fast``: 1 for every goal without one)
        ends it as ``failed`` after that many failed turns in a row.

        Raises:
            PlanError: the plan is malformed, names a missing workdir or host program
                (nothing is registered or created then).
            SupervisorRunningError: a supervisor already runs on the root (nothing registered).
            BatchError: the fleet could not run.
        """
        from loopx.supervisor.batch import (  # noqa: PLC0415 - heavy
            check_no_supervisor,
            register_plan,
            write_report,
        )

        if agents < 1:
            raise UsageError(f"--agents must be at least 1, got {agents}", hint="pass --agents N")
        plan_path = Path(plan).resolve()
        loaded = self.check_plan(plan_path)
        check_no_supervisor(self.layout)  # before registering: a running fleet would take them
        goal_ids = register_plan(self.layout, loaded, plan_path.parent, now=now or utcnow())
        report = self.run_until_idle(
            goal_ids,
            agents=agents,
            max_wall_s=max_wall_s,
            idle_horizon_s=idle_horizon_s,
            progress=progress,
            stop=stop,
            max_failures={
                g.id: g.max_failures or 1
                for g in loaded.goals
                if g.max_failures is not None or fail_fast
            },
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

    @staticmethod
    def check_options(**options: Unpack[FleetOptions]) -> None:
        """Refuse run options as `supervisor run|start` does, before a root is even opened.

        Raises:
            UsageError: an option is out of range or does not fit the back-end.
        """
        fleet_config(options)

    def start(self, **options: Unpack[FleetOptions]) -> SupervisorStarted:
        """`loopx supervisor start`: run the supervisor in the background (logs/supervisor.log).

        ``options`` are those of :meth:`run` (:class:`loopx.api.FleetOptions`),
        checked here, before anything starts.

        Raises:
            UsageError: an option is out of range.
            SupervisorRunningError: one is already running on this root.
            SupervisorStartError: it did not come up (its log's tail is in the message).
        """
        from loopx.supervisor.control import start_detached  # noqa: PLC0415 - heavy

        return start_detached(self.layout, run_argv(fleet_config(options)))

    def run(
        self,
        *,
        child: bool = False,
        stop: threading.Event | None = None,
        **options: Unpack[FleetOptions],
    ) -> RunSummary:
        """`loopx supervisor run`: run the supervisor in the foreground until stopped (or idle).

        In this process (the default) the supervisor owns SIGTERM, SIGINT and
        SIGHUP, so call it from the main thread; with ``child=True`` it runs as
        a child process (log in logs/supervisor.log) from any thread, stopped
        when ``stop`` is set or this call is interrupted. Either way the
        result is the summary `supervisor run --json` prints; its
        ``exit_code`` is the command's.

        Raises:
            UsageError: an option is out of range.
            SupervisorRunningError: another supervisor holds the root (in this process).
            SupervisorRunError: the child ended without a summary (``child=True``).
        """
        from loopx.supervisor.summary import summarise  # noqa: PLC0415 - heavy

        config = fleet_config(options)
        if child:
            return run_child(self.layout, config, stop)
        started = utcnow()
        code = self._run_here(config)
        return summarise(self.layout, exit_code=code, started_at=started, now=utcnow())

    def run_service(self, **options: Unpack[FleetOptions]) -> int:
        """Like :meth:`run` in this process, but return only the exit code.

        A service manager's stop does not wait for a summary, which reads every
        goal's files (long at 100,000 goals). Main thread only.

        Raises:
            UsageError: an option is out of range.
            SupervisorRunningError: another supervisor holds the root.
        """
        return self._run_here(fleet_config(options))

    def _run_here(self, config: SupervisorConfig) -> int:
        from loopx.agents.loop import Agent  # noqa: PLC0415 - heavy
        from loopx.supervisor.supervisor import Supervisor  # noqa: PLC0415

        return Supervisor(self.layout, config, make_agent=Agent).run()

    def stop(self, *, timeout_s: float | None = None, force: bool = False) -> SupervisorStopped:
        """`loopx supervisor stop`: stop the running supervisor and its whole fleet.

        Raises:
            UsageError: ``timeout_s`` is negative or not finite.
        """
        from loopx.supervisor.control import stop  # noqa: PLC0415 - heavy

        if timeout_s is not None and not 0 <= timeout_s < float("inf"):
            raise UsageError(
                f"--timeout must be 0 or more seconds, got {timeout_s:g}",
                hint="pass --timeout S with S >= 0 (or leave it out to wait for the grace)",
            )

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

    def attach_command(self) -> list[str]:
        """The argv that attaches a terminal to the visible (tmux) fleet.

        Raises:
            SupervisorNotRunningError: no supervisor runs.
            HeadlessFleetError: the fleet runs without tmux windows.
            TmuxError: the fleet's tmux session is gone.
        """
        from loopx.supervisor.control import attach_argv  # noqa: PLC0415 - heavy

        return attach_argv(self.layout)

    def attach(self) -> NoReturn:
        """`loopx supervisor attach`: replace this process with tmux attached to the fleet.

        Raises:
            The errors of :meth:`attach_command`.
        """
        argv = self.attach_command()
        os.execv(argv[0], argv)  # noqa: S606 - attach replaces this process with tmux, by design

    def run_agent(
        self,
        *,
        agent_id: str,
        max_turns: int | None = None,
        once: bool = False,
        heartbeat_s: float = 2.0,
        idle_max_s: float = 2.0,
        parent_pid: int | None = None,
        parent_started_at: float | None = None,
    ) -> int:
        """`loopx agent run`: one agent loop in this process, until stopped, ``max_turns`` or ``once``.

        The agent owns SIGTERM and SIGINT (call it from the main thread): the
        first stops at a safe point, the second at once.

        Returns:
            The exit code the agent process would end with (0: stopped cleanly).

        Raises:
            InvalidGoalIdError: ``agent_id`` is not a single safe path segment.
        """
        from loopx.agents.loop import run_agent  # noqa: PLC0415 - heavy

        config = AgentConfig(
            agent_id=validate_goal_id(agent_id),
            max_turns=max_turns,
            once=once,
            heartbeat_s=heartbeat_s,
            idle_max_s=idle_max_s,
            parent_pid=parent_pid,
            parent_started_at=parent_started_at,
        )
        return run_agent(self.layout, config)
