"""The check step: run the goal's done-check on a settled turn, record its result.

A settled journal whose check is due (:meth:`loopx.turn.journal.TurnJournal.check_due`)
is written first, so the host's outcome is durable and never run again; then
the check runs (outside the goal's lock, the lease renewed meanwhile) and its
result is recorded in one journal rewrite before any effect of the turn. A
crash before that rewrite leaves a journal recovery marks ``run_check``: the
next claim resumes the table at this step; a recorded result is never run
again. A stop that ends the check leaves the settled journal for the next
claim. The pure part is :func:`loopx.turn.phases.record_check`.
"""

from __future__ import annotations

from loopx.faults import fault_point
from loopx.log import get_logger
from loopx.model import utcnow
from loopx.storage.dirs import forget_checked_dirs
from loopx.turn.journal import Phase, write_journal
from loopx.turn.phases import record_check
from loopx.turn.steps.context import Stop, StopKind, TurnContext

log = get_logger(__name__)

# The phases the outcome's write completes, each bracketed, and the check's own start.
OUTCOME_POINTS = (
    f"after:{Phase.HOST_EXECUTE}",
    f"before:{Phase.TYPED_RESULT}",
    f"after:{Phase.TYPED_RESULT}",
    f"before:{Phase.VALIDATION}",
    f"after:{Phase.VALIDATION}",
)


def check_due(ctx: TurnContext) -> bool:
    """Whether the turn's journal waits for its done-check (the row applies)."""
    return ctx.journal is not None and ctx.journal.check_due()


def run_check(ctx: TurnContext) -> TurnContext | Stop:
    """Record the settled journal, run its due check, record the check's result.

    Raises:
        LeaseLostError: a newer epoch took the goal; nothing more was written.
    """
    journal = ctx.planned
    write_journal(ctx.layout, journal, ctx.fence)  # the host's outcome is durable before the check
    for point in (*OUTCOME_POINTS, f"before:{Phase.DONE_CHECK}"):
        fault_point(point)
    result = ctx.processes.run_check(ctx, journal)
    forget_checked_dirs()  # the check may have planted a symlink: check every directory again
    if not result.passed and ctx.options.stopping and not result.timed_out:
        log.info("done_check_stopped", turn_key=journal.turn_key)
        return Stop(StopKind.STOPPED, "check_stopped")
    log.info(
        "done_check_recorded",
        turn_key=journal.turn_key,
        passed=result.passed,
        exit_code=result.exit_code,
    )
    journal = record_check(journal, result, now=utcnow())
    write_journal(ctx.layout, journal, ctx.fence)
    fault_point(f"after:{Phase.DONE_CHECK}")
    return ctx.but(journal=journal)
