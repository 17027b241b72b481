"""Gather the until-idle inputs from the runtime root: the I/O edge of :mod:`.idle`."""

from __future__ import annotations

from datetime import datetime

from loopx.errors import LoopxError
from loopx.history.reader import last_history_line
from loopx.log import get_logger
from loopx.quota.decision import decide
from loopx.registry.catalog import load_registry
from loopx.registry.goalrecords import GoalStatus
from loopx.root import Layout
from loopx.schedule.candidates import held_by_account, lease_expiry
from loopx.state import load_state
from loopx.supervisor.idle import GoalProgress
from loopx.turn.outcome import ResultKind

log = get_logger(__name__)


def goal_progress(layout: Layout, *, now: datetime) -> list[GoalProgress]:
    """Every registered goal's progress inputs; a goal whose files cannot be read counts as failed."""
    out = []
    for goal in load_registry(layout).goals.values():
        if goal.status in (GoalStatus.DONE, GoalStatus.ARCHIVED):
            out.append(GoalProgress(goal_id=goal.id, status=goal.status))
            continue
        try:
            state = load_state(layout, goal.id)
            leased_until = lease_expiry(layout, goal.id, now=now)
            # A goal its account holds (a limit, a gate, a damaged file) waits on the account.
            decision = held_by_account(
                layout, goal, decide(layout, goal, now=now, leased=False), now=now
            )
            last = last_history_line(layout.history_file(goal.id))
        except LoopxError as e:
            log.warning("progress_unreadable", goal_id=goal.id, error=e.message)
            out.append(GoalProgress(goal_id=goal.id, status=goal.status, last_failed=True))
            continue
        last_failed = last is not None and (
            last.status == "failed" or last.kind is ResultKind.FAILED
        )
        out.append(
            GoalProgress(
                goal_id=goal.id,
                status=goal.status,
                open_gates=len(state.open_gates),
                running=leased_until is not None and leased_until > now,
                # As every decision reads it: a wait recorded ahead of this clock counts as
                # served, never as a far wait that makes the goal look blocked.
                eligible_at=state.eligible_at(now),
                quota_allowed=decision.allowed,
                quota_next_eligible_at=decision.next_eligible_at,
                last_failed=last_failed or state.consecutive_failures > 0,
            )
        )
    return out
