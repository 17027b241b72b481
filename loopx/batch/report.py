"""The batch report: per goal, how it ended, what it cost, and why it failed. Pure."""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from enum import StrEnum
from typing import Literal

from pydantic import Field

from loopx import exitcodes
from loopx.fleet import FleetRecord
from loopx.history.reader import read_history
from loopx.model import Record, UtcDatetime
from loopx.quota.ledger import SpendRecord, read_spend
from loopx.registry.catalog import load_registry
from loopx.registry.goalrecords import Goal, GoalStatus
from loopx.root import Layout
from loopx.state import GoalState, load_state
from loopx.turn.historyline import HistoryLine


class Outcome(StrEnum):
    """How a goal stands at the end of a batch run."""

    COMPLETED = "completed"
    NEEDS_HUMAN = "needs_human"
    FAILED = "failed"  # its last turn failed and no later turn succeeded
    PAUSED = "paused"
    UNFINISHED = "unfinished"  # still active: out of quota or time


class FailureCount(Record):
    """How often one failure reason ended a turn of the goal."""

    reason: str
    turns: int
    last_message: str


class GoalReport(Record):
    """One goal's line of the report."""

    goal_id: str
    outcome: Outcome
    turns: int
    committed_turns: int
    cpu_s: float
    wall_s: float
    peak_rss_mb: float
    tokens: int
    cost_usd: float
    last_summary: str = ""
    open_question: str | None = None
    failures: list[FailureCount] = Field(default_factory=list)


class BatchReport(Record):
    """``report.json``."""

    schema_version: Literal[1] = 1
    generated_at: UtcDatetime
    root: str
    exit_code: int
    counts: dict[Outcome, int]  # every outcome, 0 included
    goals: list[GoalReport]
    max_wall_reached: bool = False  # the run was stopped by --max-wall before it was idle


def goal_outcome(goal: Goal, state: GoalState, history: list[HistoryLine]) -> Outcome:
    """How ``goal`` stands: done, waiting for a human, failing, paused or unfinished."""
    if goal.status is GoalStatus.DONE:
        return Outcome.COMPLETED
    if state.open_gates:
        return Outcome.NEEDS_HUMAN
    if goal.status is GoalStatus.PAUSED:
        return Outcome.PAUSED
    if history and history[-1].status == "failed":
        return Outcome.FAILED
    return Outcome.UNFINISHED


def goal_report(
    goal: Goal, state: GoalState, history: list[HistoryLine], spend: list[SpendRecord]
) -> GoalReport:
    """Summarise one goal from its registry entry, state, history and ledger."""
    failed = [h for h in history if h.status == "failed"]
    reasons = Counter(h.failure or "unknown" for h in failed)
    last_message = {h.failure or "unknown": h.failure_message or h.summary for h in failed}
    open_gates = state.open_gates
    return GoalReport(
        goal_id=goal.id,
        outcome=goal_outcome(goal, state, history),
        turns=len(history),
        committed_turns=sum(1 for h in history if h.status == "committed"),
        cpu_s=round(sum(s.usage.cpu_s for s in spend), 3),
        wall_s=round(sum(s.usage.wall_s for s in spend), 3),
        peak_rss_mb=round(max((s.usage.peak_rss_mb for s in spend), default=0.0), 1),
        tokens=sum(s.usage.tokens for s in spend),
        cost_usd=round(sum(s.usage.cost_usd for s in spend), 6),
        last_summary=history[-1].summary if history else "",
        open_question=open_gates[0].question if open_gates else None,
        failures=[
            FailureCount(reason=r, turns=n, last_message=last_message[r])
            for r, n in sorted(reasons.items())
        ],
    )


def exit_code_for(goals: list[GoalReport]) -> int:
    """``OK`` when every goal completed, ``NEEDS_HUMAN`` when some need one and none failed.

    Else ``FAILURE`` (a failed, paused or unfinished goal).
    """
    outcomes = {g.outcome for g in goals}
    if outcomes <= {Outcome.COMPLETED}:
        return exitcodes.OK
    if outcomes <= {Outcome.COMPLETED, Outcome.NEEDS_HUMAN}:
        return exitcodes.NEEDS_HUMAN
    return exitcodes.FAILURE


def build_report(root: str, goals: list[GoalReport], *, now: datetime) -> BatchReport:
    """The whole report over the given goals' lines."""
    counts = Counter(g.outcome for g in goals)
    return BatchReport(
        generated_at=now,
        root=root,
        exit_code=exit_code_for(goals),
        counts={o: counts[o] for o in Outcome},
        goals=goals,
    )


def render_markdown(report: BatchReport) -> str:
    """``report.md``: a table a person can read, then each goal's failures."""
    lines = [
        "# LoopX batch report",
        "",
        f"Generated {report.generated_at:%Y-%m-%d %H:%M:%S} UTC for root `{report.root}`; "
        f"exit code {report.exit_code}."
        + (" Stopped by --max-wall before the fleet was idle." if report.max_wall_reached else ""),
        "",
        "| goal | outcome | turns | CPU s | wall s | peak RSS MB | last summary |",
        "| --- | --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for g in report.goals:
        summary = (g.open_question and f"asks: {g.open_question}") or g.last_summary
        summary = summary.replace("|", "\\|").replace("\n", " ")[:120]
        lines.append(
            f"| {g.goal_id} | {g.outcome} | {g.turns} | {g.cpu_s:.2f} | {g.wall_s:.2f} "
            f"| {g.peak_rss_mb:.1f} | {summary} |"
        )
    failing = [g for g in report.goals if g.failures]
    if failing:
        lines += ["", "## Failures", ""]
        for g in failing:
            for f in g.failures:
                lines.append(f"- **{g.goal_id}**: {f.reason} x{f.turns}: {f.last_message}")
    lines.append("")
    return "\n".join(lines)


def gather_goal_reports(layout: Layout, goal_ids: list[str]) -> list[GoalReport]:
    """Read each goal's registry entry, state, history and ledger, and summarise it."""
    registry = load_registry(layout)
    reports = []
    for goal_id in goal_ids:
        goal = registry.goals.get(goal_id)
        if goal is None:
            continue
        reports.append(
            goal_report(
                goal,
                load_state(layout, goal_id),
                read_history(layout, goal_id),
                read_spend(layout, goal_id),
            )
        )
    return reports


class RunSummary(Record):
    """The end of one supervisor run (``supervisor run --json``): how every goal stands."""

    schema_version: Literal[1] = 1
    root: str
    exit_code: int
    started_at: UtcDatetime
    ended_at: UtcDatetime
    wall_s: float
    turns: int  # turns that ended during this run
    failed_turns: int
    goals: dict[Outcome, int]  # every registered goal by how it stands now
    supervisor: FleetRecord | None
