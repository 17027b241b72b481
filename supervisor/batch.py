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
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from types import FrameType

from loopx import exitcodes
from loopx.batch.report import (
    BatchReport,
    GoalReport,
    build_report,
    gather_goal_reports,
    render_markdown,
)
from loopx.errors import LoopxError
from loopx.log import get_logger
from loopx.model import utcnow
from loopx.process import set_parent_death_signal
from loopx.registry.catalog import load_registry
from loopx.registry.goals import add_goal, build_goal
from loopx.registry.plan import BatchPlan
from loopx.root import Layout
from loopx.storage.files import atomic_write_bytes, atomic_write_model, ensure_dir
from loopx.supervisor.child import last_error, log_end, open_log, supervisor_argv
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


def register_plan(layout: Layout, plan: BatchPlan, plan_dir: Path, *, now: datetime) -> list[str]:
    """Register the plan's goals; a goal whose policy already matches is left untouched.

    Returns:
        The plan's goal ids, in plan order.

    """
    registry = load_registry(layout)
    for entry in plan.goals:
        changes = entry.changes(plan_dir)
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

    def request_stop(self, _signum: int = signal.SIGTERM, _frame: FrameType | None = None) -> None:
        """Signal handler: stop the fleet gracefully at the next poll."""
        self.stop_requested = True

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
                env=child_env(os.environ),
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
        reports = gather_goal_reports(self.layout, self.goal_ids)
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
