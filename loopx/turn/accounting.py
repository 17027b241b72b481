"""What a turn does to its account, derived from the journal alone.

:func:`turn_signal` reads a settled journal (pure); :func:`apply_turn`
applies it to the account's state, fenced by the turn key and attempt. It
runs twice per turn, both idempotent: as soon as the host's outcome is known,
before the journal records it (so a crash there leaves the account parked and
no other goal runs into the limit), and in ``scheduler_apply`` (so recovery
of a journal converges to the same account state as an undisturbed run).
"""

from __future__ import annotations

from datetime import timedelta

from loopx.accounts.accountfiles import read_state
from loopx.accounts.accountstore import apply_signal
from loopx.accounts.records import OnLimit, Signal, TurnSignal, account_of
from loopx.errors import GoalNotFoundError
from loopx.registry.goalrecords import GoalStatus
from loopx.registry.goals import get_goal, set_status
from loopx.root import Layout
from loopx.turn.failures import RESET_UNKNOWN, FailureReason
from loopx.turn.journal import TurnJournal

_EVIDENCE = {
    FailureReason.HOST_RATE_LIMITED.value: Signal.LIMIT,
    FailureReason.HOST_SERVER_ERROR.value: Signal.OVERLOAD,
    FailureReason.HOST_STALLED.value: Signal.OVERLOAD,  # the provider's trouble, like a 5xx
    FailureReason.HOST_UNREACHABLE.value: Signal.NONE,  # the network, not the account
}


def fence_key(journal: TurnJournal) -> str:
    """The key an account remembers a turn's attempt by (a retried host is a new attempt)."""
    return f"{journal.turn_key}#{journal.attempt}"


def _signal(journal: TurnJournal) -> tuple[Signal, str]:
    if journal.outcome is None:
        return Signal.NONE, ""
    failure = journal.failure
    if failure is not None:
        if failure.reason is FailureReason.HOST_AUTH:
            return Signal.AUTH, failure.message
        return Signal.NONE, ""
    result = journal.result
    if result is None:
        return Signal.NONE, ""
    for evidence in result.evidence:
        if evidence in _EVIDENCE:
            return _EVIDENCE[evidence], result.summary
    return Signal.THROUGH, ""


def turn_signal(journal: TurnJournal) -> TurnSignal:
    """The turn's evidence about its account. Pure."""
    plan = journal.plan
    signal, message = _signal(journal)
    reset_at = None
    if (
        signal is Signal.LIMIT
        and journal.result is not None
        and RESET_UNKNOWN not in journal.result.evidence
    ):
        # As the adapter measured it (diagnosis.rate_limited): from the turn's start. Without
        # a reset the account backs off by itself (reset_at None, loopx.accounts.rules).
        started = plan.envelope.deadline_at - timedelta(seconds=plan.envelope.turn_timeout_s)
        reset_at = started + timedelta(seconds=journal.result.wait_seconds or 0)
    return TurnSignal(
        account=account_of(plan.account, plan.host_kind),
        goal_id=journal.goal_id,
        turn_key=fence_key(journal),
        signal=signal,
        at=journal.turn_end,
        reset_at=reset_at,
        message=message[:500],
        on_limit=OnLimit(plan.on_limit),
        max_limit_waits=plan.max_limit_waits,
        max_overloads=plan.max_overloads,
        input_tokens=journal.usage.input_tokens,
        output_tokens=journal.usage.output_tokens,
        cost_usd=journal.usage.cost_usd,
        windows=journal.outcome.windows if journal.outcome is not None else [],
    )


def apply_turn(layout: Layout, journal: TurnJournal) -> None:
    """Apply the turn's evidence to its account; with ``--on-limit stop`` a limit pauses the goal.

    Idempotent: the account fences by turn key and attempt, and pausing an
    already paused goal is a no-op.
    """
    turn = turn_signal(journal)
    if turn.signal is Signal.LIMIT and turn.on_limit is OnLimit.STOP:
        fresh = turn.turn_key not in read_state(layout, turn.account).applied
        if fresh:
            try:
                goal = get_goal(layout, journal.goal_id)
            except GoalNotFoundError:
                goal = None
            if goal is not None and goal.status is GoalStatus.ACTIVE:
                set_status(layout, journal.goal_id, GoalStatus.PAUSED, now=turn.at)
    apply_signal(layout, turn)
