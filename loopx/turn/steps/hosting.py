"""The host and settle steps: run the host once (again while killed from outside), read it.

The host runs in the agent process's machinery (:class:`~loopx.turn.steps.context.TurnProcesses`):
its own session, the envelope on stdin, its tree sampled and killed past
its limits, its output redacted. What comes back is the journal with the
host's outcome and usage, in memory: the outcome becomes durable with the
next journal write (the check step's, or the writeback's), and a crash
before that runs the host again under the same turn key.

Settling (``typed_result`` and ``validation``) is pure. The account learns
what the host said before the journal records it: a crash in between
leaves the account parked, so no other goal runs into its limit
(:mod:`loopx.turn.accounting`).
"""

from __future__ import annotations

from loopx.errors import resource_fault
from loopx.faults import fault_point
from loopx.log import get_logger
from loopx.model import utcnow
from loopx.root import Layout
from loopx.storage.dirs import forget_checked_dirs
from loopx.turn.accounting import apply_turn
from loopx.turn.journal import Phase, TurnJournal
from loopx.turn.phases import settle
from loopx.turn.steps.context import TurnContext

log = get_logger(__name__)


def run_host(ctx: TurnContext) -> TurnContext:
    """The journal with the host's outcome and usage (or why it could not start)."""
    fault_point(f"before:{Phase.HOST_EXECUTE}")
    journal = ctx.processes.run_host(ctx)
    forget_checked_dirs()  # the host may have planted a symlink: check every directory again
    return ctx.but(journal=journal)


def settle_outcome(ctx: TurnContext) -> TurnContext:
    """``typed_result`` and ``validation`` of the outcome; the account told what the host said."""
    journal = settle(ctx.planned, now=utcnow())
    if journal.outcome is not None:  # a host that never started told the account nothing
        park_account(ctx.layout, journal)
    return ctx.but(journal=journal)


def park_account(layout: Layout, journal: TurnJournal) -> None:
    """The turn's effect on its account, early; a refused write leaves it to scheduler_apply.

    A full or read-only root must not cost the host's outcome: the outcome write waits the
    fault out, and scheduler_apply applies the account's update again (it is idempotent).
    """
    try:
        apply_turn(layout, journal)
    except OSError as e:
        if resource_fault(e) is None:
            raise
        log.warning("account_update_deferred", reason=resource_fault(e))
