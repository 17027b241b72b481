"""What `loopx supervisor run` says when it ends: goals done, waiting and failed, turns, time.

The CLI renders it for a terminal (``loopx.cli._supervisor.render_summary``).
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime

from loopx.batch.report import Outcome, RunSummary, goal_outcome
from loopx.errors import LoopxError
from loopx.history.reader import read_history
from loopx.registry.catalog import load_registry
from loopx.root import Layout
from loopx.state import load_state
from loopx.supervisor.lock import read_record


def summarise(layout: Layout, *, exit_code: int, started_at: datetime, now: datetime) -> RunSummary:
    """Read the registry, states and histories once, after the fleet stopped.

    A goal whose files cannot be read counts as failed: the summary of a run
    never hides the run's exit code behind a damaged file (doctor reports it).
    """
    outcomes: Counter[Outcome] = Counter()
    turns = failed = 0
    for goal in load_registry(layout).goals.values():
        try:
            history = read_history(layout, goal.id)
            outcomes[goal_outcome(goal, load_state(layout, goal.id), history)] += 1
        except LoopxError:
            outcomes[Outcome.FAILED] += 1
            continue
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
