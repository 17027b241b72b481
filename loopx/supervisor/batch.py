"""Headless batch runs: register a plan, run a fleet until idle, write the report.

The fleet is a real `loopx supervisor run --until-idle` child that dies with
this process (``PR_SET_PDEATHSIG``), so a SIGKILLed batch leaves no fleet
behind, and running the same command again recovers and finishes the work.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from types import FrameType

from loopx import exitcodes
from loopx.accounts.accountfiles import check_goal_account
from loopx.batch.report import (
    BatchReport,
    GoalReport,
    Outcome,
    build_report,
    gather_goal_reports,
    render_markdown,
)
from loopx.errors import LoopxError
from loopx.log import get_logger
from loopx.log.rotation import open_log
from loopx.model import utcnow
from loopx.process import set_parent_death_signal
from loopx.registry.catalog import load_registry
from loopx.registry.goalrecords import GoalStatus
from loopx.registry.goals import add_goal, build_goal, set_status
from loopx.registry.plan import BatchPlan
from loopx.root import Layout
from loopx.state import load_state
from loopx.storage.dirs import ensure_dir
from loopx.storage.files import atomic_write_bytes, atomic_write_model
from loopx.supervisor.child import last_error, log_end, log_env, supervisor_argv
from loopx.supervisor.lock import acquire
from loopx.supervisor.notify import child_env

log = get_logger(__name__)

STOP_GRACE_S = 20.0


class BatchError(LoopxError):
    """The batch's fleet could not run (for example another supervisor holds the root)."""


@dataclass(frozen=True, slots=True)
class BatchConfig:
    """How to run one batch."""

    agents: int = 2
    report_dir: Path | None = None  # default: <root>/reports/batch-<UTC stamp>
    max_wall_s: float | None = None
    idle_horizon_s: float = 60.0
    poll_s: float = 0.5
    # goal id -> failed turns in a row that end it as `failed` (plan max_failures, --fail-fast)
    max_failures: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Progress:
    """What a progress display shows."""

    goals: int
    done: int
    needs_human: int
    turns: int
    failures: int
    elapsed_s: float


def progress_of(reports: list[GoalReport], elapsed_s: float) -> Progress:
    """Counts for the progress display. Pure."""
    return Progress(
        goals=len(reports),
        done=sum(1 for r in reports if r.outcome == "completed"),
        needs_human=sum(1 for r in reports if r.outcome == "needs_human"),
        turns=sum(r.turns for r in reports),
        failures=sum(f.turns for r in reports for f in r.failures),
        elapsed_s=elapsed_s,
    )


def check_no_supervisor(layout: Layout) -> None:
    """Refuse a batch on a root a supervisor runs on, before anything is registered.

    Raises:
        SupervisorRunningError: one holds ``supervisor.lock`` now.
    """
    acquire(layout).release()


def register_plan(layout: Layout, plan: BatchPlan, plan_dir: Path, *, now: datetime) -> list[str]:
    """Register the plan's goals; a goal whose policy already matches is left untouched.

    Returns:
        The plan's goal ids, in plan order.

    """
    registry = load_registry(layout)
    for entry in plan.goals:  # every account first: an unknown one registers nothing
        if entry.account is not None or entry.fallback_accounts:
            check_goal_account(
                layout,
                build_goal(
                    entry.id, None, entry.changes(plan_dir), default_workdir=plan_dir, now=now
                ),
            )
    for entry in plan.goals:
        changes = entry.changes(plan_dir)
        if entry.workdir is None:  # the default work/<id>; a named one was checked to exist
            Path(changes.workdir or plan_dir).mkdir(parents=True, exist_ok=True)
        existing = registry.goals.get(entry.id)
        if existing is not None:
            wanted = build_goal(
                entry.id, existing, changes, default_workdir=plan_dir, now=existing.updated_at
            )
            if wanted == existing:
                continue
        add_goal(layout, entry.id, changes, update=True, default_workdir=plan_dir, now=now)
    return [g.id for g in plan.goals]


class BatchRun:
    """One batch: a supervisor child, a progress loop, and the report at the end."""

    def __init__(
        self,
        layout: Layout,
        goal_ids: list[str],
        config: BatchConfig,
        show: Callable[[Progress], None],
        stop: threading.Event | None = None,
    ) -> None:
        self.layout = layout
        self.stop = stop  # set from another thread: stop the fleet gracefully, as SIGTERM does
        self.goal_ids = goal_ids
        self.config = config
        self.show = show
        self.stop_requested = False
        self.max_wall_reached = False
        self.given_up: set[str] = set()  # ended by max_failures: reported as failed
        # Each limited goal's streak before this batch: a goal resumed by a human gets a turn.
        self.streak_at_start = {
            g: load_state(layout, g).consecutive_failures for g in config.max_failures
        }

    def request_stop(self, _signum: int = signal.SIGTERM, _frame: FrameType | None = None) -> None:
        """Signal handler: stop the fleet gracefully at the next poll."""
        self.stop_requested = True

    def _give_up_hopeless(self) -> None:
        """Pause each goal whose failure streak reached its ``max_failures``: no more retries.

        Pausing is what makes the fleet idle at once instead of after the backoff
        rounds (one always-failing goal made a batch take 96 s).
        """
        for goal_id, limit in self.config.max_failures.items():
            if goal_id in self.given_up:
                continue
            streak = load_state(self.layout, goal_id).consecutive_failures
            if streak < limit:
                continue
            goal = load_registry(self.layout).goals.get(goal_id)
            fresh = streak > self.streak_at_start.get(goal_id, 0)
            if goal is None or not (fresh or goal.status is GoalStatus.PAUSED):
                continue
            if goal.status is GoalStatus.ACTIVE:
                set_status(self.layout, goal_id, GoalStatus.PAUSED, now=utcnow())
                log.info("batch_goal_failed", goal_id=goal_id, failures=streak, limit=limit)
            self.given_up.add(goal_id)

    def _spawn_fleet(self, log_path: Path) -> subprocess.Popen[bytes]:
        options = [
            "--agents", str(self.config.agents), "--until-idle",
            "--stop-grace-seconds", str(STOP_GRACE_S / 2),
            "--idle-horizon-seconds", str(self.config.idle_horizon_s),
        ]  # fmt: skip
        fd = open_log(log_path)
        try:
            return subprocess.Popen(
                supervisor_argv(self.layout, options),
                stdin=subprocess.DEVNULL,
                stdout=fd,
                stderr=fd,
                env=log_env(child_env(os.environ), log_path),
                preexec_fn=set_parent_death_signal,  # noqa: PLW1509 - one prctl, no lock taken
            )
        finally:
            os.close(fd)

    def run(self) -> BatchReport:
        """Run the fleet until idle (or stopped), then write and return the report."""
        started = time.monotonic()
        log_path = ensure_dir(self.layout.logs_dir) / "batch-supervisor.log"
        since = log_end(log_path)  # earlier batches' lines come before
        fleet = self._spawn_fleet(log_path)
        terminated_at: float | None = None
        try:
            while fleet.poll() is None:
                self._give_up_hopeless()
                elapsed = time.monotonic() - started
                self.show(progress_of(gather_goal_reports(self.layout, self.goal_ids), elapsed))
                over_time = self.config.max_wall_s is not None and elapsed > self.config.max_wall_s
                stopping = self.stop_requested or (self.stop is not None and self.stop.is_set())
                if (stopping or over_time) and terminated_at is None:
                    self.max_wall_reached = over_time
                    log.info("batch_stopping", reason="max_wall" if over_time else "signal")
                    fleet.send_signal(signal.SIGTERM)
                    terminated_at = time.monotonic()
                if terminated_at is not None and time.monotonic() - terminated_at > STOP_GRACE_S:
                    fleet.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    fleet.wait(timeout=self.config.poll_s)
        finally:
            if fleet.poll() is None:
                fleet.kill()
                fleet.wait()
        self._give_up_hopeless()
        reports = [
            r.model_copy(update={"outcome": Outcome.FAILED})
            if r.goal_id in self.given_up and r.outcome is Outcome.PAUSED
            else r
            for r in gather_goal_reports(self.layout, self.goal_ids)
        ]
        self.show(progress_of(reports, time.monotonic() - started))
        ended = (exitcodes.OK, exitcodes.FAILURE, exitcodes.NEEDS_HUMAN)  # --until-idle verdicts
        if fleet.returncode not in ended and terminated_at is None:
            raise BatchError(
                f"the fleet's supervisor exited unexpectedly ({fleet.returncode}); see {log_path}",
                hint="fix what the log names, then run the same batch again: it resumes",
            )
        failed = fleet.returncode == exitcodes.FAILURE
        if failed and not any(r.failures for r in reports) and terminated_at is None:
            raise BatchError(
                f"the fleet's supervisor failed: {last_error(log_path, since)}",
                hint=f"see {log_path}; run the same batch again once fixed: it resumes",
            )
        report = build_report(str(self.layout.root), reports, now=utcnow())
        return report.model_copy(update={"max_wall_reached": self.max_wall_reached})


def write_report(report: BatchReport, directory: Path) -> tuple[Path, Path]:
    """Write ``report.json`` and ``report.md`` atomically into ``directory``."""
    ensure_dir(directory)
    json_path, md_path = directory / "report.json", directory / "report.md"
    atomic_write_model(json_path, report)
    atomic_write_bytes(md_path, render_markdown(report).encode())
    return json_path, md_path


def default_report_dir(layout: Layout, now: datetime) -> Path:
    """``<root>/reports/batch-<UTC %Y%m%dT%H%M%SZ>``."""
    return layout.root / "reports" / f"batch-{now:%Y%m%dT%H%M%SZ}"
