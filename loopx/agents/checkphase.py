"""The ``done_check`` phase of a live turn: run the goal's check, record its result.

A settled journal whose check is due (:meth:`loopx.turn.journal.TurnJournal.check_due`)
is written first, so the host's outcome is durable and never run again; then
the check runs (outside the goal's lock, the lease renewed meanwhile) and its
result is recorded in one journal rewrite before any effect of the turn. A
crash before that rewrite leaves a journal recovery marks ``run_check``: the
next claim runs the check again (:func:`loopx.agents.turn.attempt_turn`); a
recorded result is never run again. The pure part is
:func:`loopx.turn.phases.record_check`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from loopx import environ
from loopx.agents.donecheck import run_done_check
from loopx.faults import fault_point
from loopx.log import get_logger
from loopx.model import utcnow
from loopx.root import Layout
from loopx.turn.journal import Phase, TurnJournal, write_journal
from loopx.turn.lease import Fence
from loopx.turn.phases import record_check, settle

log = get_logger(__name__)


def run_check_phase(
    layout: Layout,
    journal: TurnJournal,
    fence: Fence,
    *,
    renew: Callable[[], None],
    renew_every_s: float,
    kill_grace_s: float,
    stop: threading.Event | None,
) -> TurnJournal:
    """Record the settled journal, run its due check, record the check's result.

    Returns:
        The journal with ``done_check`` complete; or, when a stop ended the
        check before it finished, the settled journal without it (still
        ``in_progress``: the next claim runs the check again).

    Raises:
        LeaseLostError: a newer epoch took the goal; nothing more was written.

    """
    if not journal.done(Phase.VALIDATION):
        journal = settle(journal, now=utcnow())
    write_journal(layout, journal, fence)  # the host's outcome is durable before the check
    for point in (
        f"after:{Phase.HOST_EXECUTE}",
        f"before:{Phase.TYPED_RESULT}",
        f"after:{Phase.TYPED_RESULT}",
        f"before:{Phase.VALIDATION}",
        f"after:{Phase.VALIDATION}",
        f"before:{Phase.DONE_CHECK}",
    ):
        fault_point(point)
    spec = journal.plan.done_check
    assert spec is not None  # noqa: S101 - check_due() says the plan has one
    env = environ.without((environ.FAULT,))
    env.update(
        {
            environ.GOAL_ID: journal.goal_id,
            environ.WORKDIR: journal.plan.envelope.workdir,
        }
    )
    result = run_done_check(
        spec.argv,
        cwd=Path(journal.plan.envelope.workdir),
        timeout_s=spec.timeout_s,
        env=env,
        loopx_root=str(layout.root),
        turn_key=journal.turn_key,
        kill_grace_s=kill_grace_s,
        stop=stop,
        tick=renew,
        tick_every_s=renew_every_s,
    )
    if not result.passed and stop is not None and stop.is_set() and not result.timed_out:
        log.info("done_check_stopped", turn_key=journal.turn_key)
        return journal
    log.info(
        "done_check_recorded",
        turn_key=journal.turn_key,
        passed=result.passed,
        exit_code=result.exit_code,
    )
    journal = record_check(journal, result, now=utcnow())
    write_journal(layout, journal, fence)
    fault_point(f"after:{Phase.DONE_CHECK}")
    return journal


__all__ = ["run_check_phase"]
