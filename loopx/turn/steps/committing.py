"""The writeback step: record the host's outcome and run the phases after it, whatever the disk.

The host ran, and until this write passes its outcome exists only in
memory: giving up would make recovery run the host again. So a write the
machine refuses (a full disk, EMFILE) is retried with backoff, the lease
renewed meanwhile, until it passes, the lease is lost, or a requested stop
has waited ``STOP_WAIT_S`` for it. The outcome and every later phase
(:func:`loopx.turn.phases.finish_held`, the phases as a table of their own)
share one hold of the goal's lock: nothing else of the goal may write in
between anyway.
"""

from __future__ import annotations

import contextlib
import errno
import shutil
from pathlib import Path
from typing import Final

from tenacity import RetryCallState, Retrying, retry_if_exception, wait_random_exponential

from loopx.errors import resource_fault
from loopx.faults import fault_point
from loopx.log import get_logger
from loopx.model import utcnow
from loopx.root import Layout
from loopx.turn.fencing import Fence
from loopx.turn.journal import Phase, TurnJournal, write_journal_unfenced
from loopx.turn.phases import finish_held
from loopx.turn.steps.checking import OUTCOME_POINTS
from loopx.turn.steps.context import TurnContext

log = get_logger(__name__)

# A finished host's outcome waits this long at most for a refused write once a
# stop was requested (the supervisor's stop grace is longer).
STOP_WAIT_S: Final = 10.0
_WRITE_RETRY_MAX_S: Final = 5.0


def commit(ctx: TurnContext) -> TurnContext:
    """Write the outcome and finish every phase, waiting out a full or failing disk.

    Raises:
        LeaseLostError: a newer epoch took the goal; nothing more was written.
    """
    stop = ctx.options.stop
    stop_deadline: list[float] = []
    renew = ctx.claimed.holder.renew

    def give_up(state: RetryCallState) -> bool:
        if stop is None or not stop.is_set():
            return False
        if not stop_deadline:
            stop_deadline.append(state.outcome_timestamp or 0.0)
        return (state.outcome_timestamp or 0.0) - stop_deadline[0] > STOP_WAIT_S

    def waiting(state: RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome is not None else None
        log.warning(
            "turn_writes_deferred",
            reason=resource_fault(error) if error is not None else None,
            attempt=state.attempt_number,
        )
        # Still failing past the lease's grace: fencing refuses our writes if
        # another agent took the goal meanwhile; until then keep trying.
        with contextlib.suppress(OSError):
            renew()

    for attempt in Retrying(
        retry=retry_if_exception(lambda e: resource_fault(e) is not None),
        wait=wait_random_exponential(multiplier=0.25, max=_WRITE_RETRY_MAX_S),
        stop=give_up,
        before_sleep=waiting,
        reraise=True,
    ):
        with attempt:
            done = _write_outcome_and_finish(ctx.layout, ctx.planned, ctx.fence)
    fault_point(f"after:{Phase.SCHEDULER_ACK}")
    return ctx.but(journal=done)


def _write_outcome_and_finish(layout: Layout, journal: TurnJournal, fence: Fence) -> TurnJournal:
    # One hold of the goal's lock (epoch checked once) for the outcome write and
    # every later phase: nothing else of this goal may write in between anyway.
    with fence.held():
        write_journal_unfenced(layout, journal)
        with contextlib.suppress(OSError):
            clear_result(Path(journal.plan.envelope.result_file))  # its text is in the journal
        # With a done-check these points passed before the check ran (the check step).
        for point in () if journal.done(Phase.DONE_CHECK) else OUTCOME_POINTS:
            fault_point(point)
        return finish_held(layout, journal, now=utcnow())


def clear_result(path: Path) -> None:
    """Remove whatever is at the result path: a file, a FIFO, a device node, a directory tree.

    A host may leave any of them; a directory is removed with its contents
    (``shutil.rmtree`` on Linux works through directory descriptors and never
    follows a symlink), so no stale drop box outlives its turn.
    """
    try:
        path.unlink()
    except FileNotFoundError:
        return
    except IsADirectoryError:
        shutil.rmtree(path)
    except OSError as e:
        if e.errno != errno.EISDIR and not path.is_dir():
            raise
        shutil.rmtree(path)
