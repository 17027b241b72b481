"""What `loopx supervisor run` says when it ends: goals done, waiting and failed, turns, time."""

from __future__ import annotations

from collections import Counter
from datetime import datetime

from loopx.batch.report import Outcome, RunSummary, goal_outcome
from loopx.history.reader import read_history
from loopx.registry.catalog import load_registry
from loopx.root import Layout
from loopx.state import load_state
from loopx.supervisor.lock import read_record


def summarise(layout: Layout, *, exit_code: int, started_at: datetime, now: datetime) -> RunSummary:
    """Read the registry, states and histories once, after the fleet stopped."""
    outcomes: Counter[Outcome] = Counter()
    turns = failed = 0
    for goal in load_registry(layout).goals.values():
        history = read_history(layout, goal.id)
        outcomes[goal_outcome(goal, load_state(layout, goal.id), history)] += 1
        mine = [h for h in history if h.ended_at >= started_at]
        turns += len(mine)
        failed += sum(1 for h in mine if h.status == "failed")
    return RunSummary(
        root=str(layout.root),
        exit_code=exit_code,
        started_at=started_at,
        ended_at=now,
        wall_s=round((now - started_at).total_seconds(), 3),
        turns=turns,
        failed_turns=failed,
        goals={o: outcomes.get(o, 0) for o in Outcome},
        supervisor=read_record(layout),
    )


def render_summary(summary: RunSummary) -> str:
    """The plain summary a person reads at the end of a run in a terminal. Pure."""
    g = summary.goals
    waiting = g[Outcome.NEEDS_HUMAN] + g[Outcome.UNFINISHED] + g[Outcome.PAUSED]
    minutes, seconds = divmod(round(summary.wall_s), 60)
    lines = [
        (
            f"loopx: supervisor stopped (exit {summary.exit_code}) after "
            f"{minutes}m{seconds:02d}s; {summary.turns} turns ran ({summary.failed_turns} failed)"
        ),
        (
            f"  goals: {g[Outcome.COMPLETED]} done, {waiting} waiting "
            f"({g[Outcome.NEEDS_HUMAN]} for a human, {g[Outcome.UNFINISHED]} unfinished, "
            f"{g[Outcome.PAUSED]} paused), {g[Outcome.FAILED]} failed"
        ),
    ]
    if g[Outcome.NEEDS_HUMAN]:
        lines.append(f"  next: `loopx status --root {summary.root} --actor human`")
    return "\n".join(lines)
