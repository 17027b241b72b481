"""A finished turn's one line on an agent's console: what came of it, when the goal runs next."""

from __future__ import annotations

from loopx.agents.console import AgentConsole
from loopx.errors import LoopxError
from loopx.root import Layout
from loopx.state import load_state
from loopx.turn.attempt import TurnReport
from loopx.turn.failures import FailureReason


def show_outcome(console: AgentConsole, layout: Layout, report: TurnReport) -> None:
    """Print the turn's line: outcome, detail, usage, and the goal's next eligible time."""
    try:
        next_at = load_state(layout, report.goal_id).next_eligible_at
    except (LoopxError, OSError):
        next_at = None
    console.finished(
        goal_id=report.goal_id,
        seq=report.seq,
        outcome=outcome_words(report),
        detail=failure_detail(report),
        wall_s=report.usage.wall_s,
        cpu_s=report.usage.cpu_s,
        tokens=report.usage.tokens,
        cost_usd=report.usage.cost_usd,
        next_eligible_at=next_at,
    )


def outcome_words(report: TurnReport) -> str:
    """A turn's outcome in a few words: its result kind, or FAILED with the reason. Pure."""
    if report.failure is not None:
        if report.failure.reason is FailureReason.STOPPED:
            return "stopped"
        return f"FAILED {report.failure.reason}"
    return str(report.kind or report.status)


def failure_detail(report: TurnReport) -> str:
    """The first line of a failed turn's message (bounded), or the turn's summary. Pure."""
    text = report.failure.message if report.failure is not None else report.summary
    return text.splitlines()[0][:200] if text else ""
