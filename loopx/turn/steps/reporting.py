"""What the caller of a turn is told: the :class:`~loopx.turn.attempt.TurnAttempt` of a walk."""

from __future__ import annotations

from loopx.turn.attempt import TurnAttempt, TurnReport
from loopx.turn.failures import FailureReason, TurnFailure
from loopx.turn.journal import TurnJournal
from loopx.turn.outcome import TurnStatus
from loopx.turn.recovery import RecoveryAction
from loopx.turn.steps.context import Stop, StopKind, TurnContext


def attempt_of(ctx: TurnContext, stop: Stop | None) -> TurnAttempt:
    """Whether a turn ran and what came of it, from the table's end. Pure."""
    goal_id = ctx.goal.id
    if stop is not None and not stop.claimed:
        return TurnAttempt(
            goal_id=goal_id,
            claimed=False,
            blocking_agent=stop.blocking_agent,
            busy=stop.busy,
            workdir_busy=stop.workdir_busy,
        )
    recovered = list(ctx.recovered)
    if stop is not None and stop.kind is StopKind.LOST:
        return TurnAttempt(goal_id=goal_id, claimed=True, report=lost_report(ctx, stop))
    if ctx.journal is None or (stop is not None and stop.kind is not StopKind.STOPPED):
        quota = stop.quota if stop is not None else None
        return TurnAttempt(goal_id=goal_id, claimed=True, quota=quota, recovered=recovered)
    report = journal_report(ctx.journal, recovered)
    return TurnAttempt(goal_id=goal_id, claimed=True, report=report, recovered=recovered)


def journal_report(journal: TurnJournal, recovered: list[RecoveryAction]) -> TurnReport:
    """The report of a turn from its journal. Pure."""
    good = journal.good_result
    return TurnReport(
        goal_id=journal.goal_id,
        agent_id=journal.agent_id,
        turn_key=journal.turn_key,
        seq=journal.seq,
        epoch=journal.epoch,
        attempt=journal.attempt,
        status=journal.status,
        kind=good.kind if good else None,
        failure=journal.failure,
        summary=journal.result.summary if journal.result else "",
        usage=journal.usage,
        completed_phases=journal.completed_phases,
        recovered=recovered,
    )


def lost_report(ctx: TurnContext, stop: Stop) -> TurnReport:
    """The report of a turn whose lease a newer epoch took: failed, nothing more written. Pure."""
    claim = ctx.claim
    return TurnReport(
        goal_id=ctx.goal.id,
        agent_id=claim.lease.agent_id if claim is not None else ctx.agent_id,
        turn_key=stop.turn_key,
        seq=0,
        epoch=claim.lease.epoch if claim is not None else 0,
        attempt=0,
        status=TurnStatus.FAILED,
        failure=TurnFailure.of(FailureReason.LEASE_LOST, stop.message),
        completed_phases=[],
    )
