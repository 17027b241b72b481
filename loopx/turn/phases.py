"""The phases after ``host_execute``, shared by a live turn and by recovery.

Given a journal whose host outcome is recorded, :func:`finish` runs every
missing phase from journal data only (the host never runs again) and writes
the terminal journal. Each phase is idempotent, so finishing a journal twice,
or after a crash anywhere inside, converges to the same files.

Durable writes of a live turn: journal create, one rewrite after
``host_execute`` (with ``typed_result`` and ``validation``, which have no effect
of their own), the writeback files, the spend line, the scheduler's state
change when there is one, and the terminal journal.

What a power cut may lose, and why that is safe (the fault matrix covers
process deaths, where nothing written is lost):

* The effects of ``durable_writeback``, ``quota_spend`` and
  ``scheduler_apply`` are recorded in the journal only by the terminal
  rewrite, so until it is durable recovery redoes all three from the
  journal, each idempotently. Their relative durability therefore does not
  matter, only that all are durable before the terminal journal: each file's
  content is fsynced as it is written, and the directory fsyncs they owe are
  paid once per directory (:func:`loopx.storage.files.dir_sync_batch`) before the
  terminal rewrite starts. The goal directory's fsync also makes durable the
  rename of the epoch counter the claim raised (:func:`loopx.turn.fencing.recorded_epoch`).
* The terminal rewrite fsyncs its content but not the ``turns/`` directory.
  Losing that rename leaves the previous journal, whose host outcome is
  durable: recovery finishes the turn again from it and writes the same
  files. The next turn's journal create fsyncs ``turns/`` (making this rename
  durable) before its host runs, so a later turn never starts over an
  unfinished-looking one.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Final

from loopx.donecheck import NEXT_ACTION as CHECK_NEXT_ACTION
from loopx.donecheck import CheckResult
from loopx.errors import CheckPendingError, GoalNotFoundError
from loopx.faults import fault_point
from loopx.quota.ledger import SpendRecord, append_spend
from loopx.registry.goalrecords import GoalStatus
from loopx.registry.goals import get_goal, set_status
from loopx.root import Layout
from loopx.state import Gate, GoalState, load_state, update_state
from loopx.storage.dirs import dir_sync_batch
from loopx.turn.accounting import apply_turn
from loopx.turn.failures import FailureReason, TurnFailure
from loopx.turn.fencing import Fence
from loopx.turn.journal import Phase, TurnJournal, final_status, write_journal_unfenced
from loopx.turn.outcome import ResultKind
from loopx.turn.writeback import durable_writeback

BACKOFF_BASE_S: Final = 30.0
BACKOFF_MAX_S: Final = 3600.0


def failure_backoff(consecutive_failures: int) -> timedelta:
    """How long a goal rests after its n-th failure in a row: 30 s doubling, at most 1 h. Pure."""
    exponent = max(consecutive_failures - 1, 0)
    return timedelta(seconds=min(BACKOFF_BASE_S * 2 ** min(exponent, 20), BACKOFF_MAX_S))


# --- typed_result + validation (pure) ------------------------------------------------------------


def _killed_failure(reason: FailureReason, journal: TurnJournal) -> TurnFailure:
    messages = {
        FailureReason.TURN_TIMEOUT: f"host killed after turn_timeout_s={journal.plan.turn_timeout_s:g}",
        FailureReason.QUOTA_MEMORY_EXCEEDED: "host tree killed: its peak RSS "
        f"{journal.usage.peak_rss_mb:.0f} MB passed max_rss_mb={journal.plan.max_rss_mb}",
        FailureReason.STOPPED: "a stop request ended the turn; the host was terminated",
        FailureReason.HOST_STALLED: "host stopped: it wrote nothing for the stall timeout",
    }
    return TurnFailure.of(reason, messages.get(reason, f"host killed: {reason}"))


def settle(journal: TurnJournal, *, now: datetime) -> TurnJournal:
    """Run ``typed_result`` and ``validation`` on a journal with a host outcome. Pure.

    A kill (timeout, memory, stop) outranks whatever the host printed; then
    the adapter's failure; then the result, whose identity must match the turn.
    """
    outcome = journal.outcome
    failure = journal.failure
    result = None
    if outcome is not None and failure is None:
        if outcome.killed is not None:
            failure = _killed_failure(outcome.killed, journal)
        elif outcome.failure is not None:
            failure = outcome.failure
        elif outcome.result is None:
            failure = TurnFailure.of(FailureReason.NO_RESULT, "the host wrote no result")
        else:
            result = outcome.result
    elif failure is None:
        failure = TurnFailure.of(FailureReason.HOST_INTERRUPTED, "no host outcome was recorded")
    if result is not None and failure is None:
        failure = _validate(journal, result.turn_key, result.goal_id)
    return journal.model_copy(update={"result": result, "failure": failure}).with_phases(
        Phase.HOST_EXECUTE, Phase.TYPED_RESULT, Phase.VALIDATION, now=now
    )


def _validate(
    journal: TurnJournal, turn_key: str | None, goal_id: str | None
) -> TurnFailure | None:
    if turn_key is not None and turn_key != journal.turn_key:
        return TurnFailure.of(
            FailureReason.VALIDATION,
            f"result names turn {turn_key!r}, this turn is {journal.turn_key!r}",
        )
    if goal_id is not None and goal_id != journal.goal_id:
        return TurnFailure.of(
            FailureReason.VALIDATION,
            f"result names goal {goal_id!r}, this turn is for {journal.goal_id!r}",
        )
    return None


# --- done_check (pure part; the check step runs it: loopx.turn.steps.checking) ---------------


def record_check(journal: TurnJournal, check: CheckResult, *, now: datetime) -> TurnJournal:
    """The journal once the done-check's result is recorded (``done_check`` complete). Pure.

    A failing check turns a ``completed`` into ``progress``: the goal is not
    done, the check's exit and output tail are the evidence, and the next
    action is to make the check pass. The host's own result is kept as
    ``reported_result``.
    """
    used = journal.usage
    update: dict[str, object] = {
        "check": check,
        # The check's tree is charged to the goal like the host's.
        "usage": used.model_copy(
            update={
                "cpu_s": used.cpu_s + check.usage.cpu_s,
                "wall_s": used.wall_s + check.usage.wall_s,
                "peak_rss_mb": max(used.peak_rss_mb, check.usage.peak_rss_mb),
            }
        ),
    }
    result = journal.result
    if result is not None and result.kind is ResultKind.COMPLETED and not check.passed:
        spec = journal.plan.done_check
        command = spec.command if spec is not None else " ".join(check.argv)
        evidence = [
            *result.evidence[:97],
            f"done-check `{command}` {check.describe()}",
            check.output_tail or "(the done-check printed nothing)",
        ]
        update["reported_result"] = result
        update["result"] = result.model_copy(
            update={
                "kind": ResultKind.PROGRESS,
                "summary": f"reported completed, but the done-check {check.describe()}: "
                f"{result.summary}"[:4000],
                "next_action": CHECK_NEXT_ACTION,
                "evidence": evidence,
            }
        )
    return journal.model_copy(update=update).with_phases(Phase.DONE_CHECK, now=now)


# --- scheduler_apply (pure part) ------------------------------------------------------------------


def schedule(state: GoalState, journal: TurnJournal) -> GoalState:
    """The goal state after ``scheduler_apply``: next eligible time, failure streak, gate. Pure.

    Every value is set from journal data (never incremented), so a replay is a no-op.
    """
    end = journal.turn_end
    prior = journal.plan.prior_failures
    failure = journal.failure
    result = journal.result
    update: dict[str, object] = {}
    if failure is not None and failure.reason in (FailureReason.STOPPED, FailureReason.HOST_AUTH):
        # An auth failure belongs to the account, whose gate now holds every goal of it
        # (loopx.turn.accounting): no failure of the goal, no backoff of its own.
        update = {"next_eligible_at": None, "consecutive_failures": prior}
    elif failure is not None or (result is not None and result.kind is ResultKind.FAILED):
        streak = prior + 1
        at = end + failure_backoff(streak)
        if failure is not None and failure.retry_at is not None:
            at = max(at, failure.retry_at)
        update = {"next_eligible_at": at, "consecutive_failures": streak}
    elif result is not None:
        wait = timedelta(seconds=result.wait_seconds or 0)
        resume_at = end + wait if result.kind is ResultKind.WAIT and wait else None
        if journal.plan.may_hand_off and FailureReason.HOST_RATE_LIMITED.value in result.evidence:
            resume_at = None  # the limit holds its account, and a fallback may take the goal on
        update = {"next_eligible_at": resume_at, "consecutive_failures": 0}
        if result.kind is ResultKind.NEEDS_HUMAN and not any(
            g.opened_by == journal.turn_key for g in state.gates
        ):
            gate = Gate(
                id=max((g.id for g in state.gates), default=0) + 1,
                question=result.question or "the host asked for a human",
                opened_at=end,
                opened_by=journal.turn_key,
            )
            update["gates"] = [*state.gates, gate]
    new = state.model_copy(update=update)
    if new == state:
        return state
    return new.model_copy(update={"updated_at": end})


# --- the effectful phases ------------------------------------------------------------------------


def spend_record(journal: TurnJournal) -> SpendRecord | None:
    """The ledger line of a turn whose host ran, else None. Pure."""
    if journal.outcome is None:
        return None
    return SpendRecord(
        turn_key=journal.turn_key,
        goal_id=journal.goal_id,
        seq=journal.seq,
        usage=journal.usage,
        started_at=journal.outcome.started_at,
        ended_at=journal.outcome.ended_at,
    )


def quota_spend(layout: Layout, journal: TurnJournal) -> None:
    """Append the turn's measured usage to the goal's ledger (idempotent by turn_key)."""
    record = spend_record(journal)
    if record is not None:
        append_spend(layout, record)


def writeback_and_schedule(layout: Layout, journal: TurnJournal) -> None:
    """``durable_writeback`` whose state write already carries the scheduler's fields.

    ``schedule`` sets every value from the journal, so ``scheduler_apply``
    then finds nothing left to write to the state: one state write per turn,
    and a crash between the two phases still converges (both are idempotent).
    """
    durable_writeback(layout, journal, then=lambda state: schedule(state, journal))


def scheduler_apply(layout: Layout, journal: TurnJournal) -> None:
    """Write the scheduler's effects: state (eligibility, streak, gate), goal done."""
    state = load_state(layout, journal.goal_id)
    if state.turn_seq <= journal.seq and schedule(state, journal) != state:
        # Only the newest applied turn may set the schedule (turn_seq guards
        # against an old journal overriding a later turn's decision).
        update_state(layout, journal.goal_id, lambda s: schedule(s, journal))
    done = (
        journal.failure is None
        and journal.result is not None
        and journal.result.kind is ResultKind.COMPLETED
    )
    if done:
        try:
            goal = get_goal(layout, journal.goal_id)
        except GoalNotFoundError:
            goal = None  # the goal was removed from the registry; nothing to mark
        if goal is not None and goal.status is GoalStatus.ACTIVE:
            set_status(layout, journal.goal_id, GoalStatus.DONE, now=journal.turn_end)
    apply_turn(layout, journal)  # what the turn taught its account, fenced by turn key


def finish(layout: Layout, journal: TurnJournal, fence: Fence, *, now: datetime) -> TurnJournal:
    """Run every missing phase after ``host_execute`` and write the terminal journal.

    Fault points ``before:<phase>``/``after:<phase>`` bracket each phase.

    Raises:
        LeaseLostError: the fence's epoch is stale; nothing was written.

    """
    with fence.held():
        journal = finish_held(layout, journal, now=now)
    fault_point(f"after:{Phase.SCHEDULER_ACK}")
    return journal


def finish_held(layout: Layout, journal: TurnJournal, *, now: datetime) -> TurnJournal:
    """:func:`finish` for a caller already inside ``fence.held()``, up to the terminal write.

    A live turn records its host outcome and finishes under one hold of the
    goal's lock instead of two. The caller runs the ``after:scheduler_ack``
    fault point once it let the lock go.
    """
    if not journal.done(Phase.VALIDATION):
        for phase in (Phase.TYPED_RESULT, Phase.VALIDATION):
            fault_point(f"before:{phase}")
        journal = settle(journal, now=now)
        for phase in (Phase.TYPED_RESULT, Phase.VALIDATION):
            fault_point(f"after:{phase}")
    if not journal.done(Phase.DONE_CHECK) and not journal.done(Phase.DURABLE_WRITEBACK):
        if journal.check_due():
            # The check is a process: the check step runs it (loopx.turn.steps.checking)
            # before finishing; recovery leaves such a journal to the next claim.
            raise CheckPendingError(journal.goal_id, journal.turn_key)
        fault_point(f"before:{Phase.DONE_CHECK}")
        journal = journal.with_phases(Phase.DONE_CHECK, now=now)  # no check due: no effect
        fault_point(f"after:{Phase.DONE_CHECK}")
    steps = (
        (Phase.DURABLE_WRITEBACK, writeback_and_schedule),
        (Phase.QUOTA_SPEND, quota_spend),
        (Phase.SCHEDULER_APPLY, scheduler_apply),
    )
    with dir_sync_batch():  # every effect durable before the terminal journal (module docstring)
        for phase, step in steps:
            if journal.done(phase):
                continue
            fault_point(f"before:{phase}")
            step(layout, journal)
            journal = journal.with_phases(phase, now=now)
            fault_point(f"after:{phase}")
    fault_point(f"before:{Phase.SCHEDULER_ACK}")
    journal = journal.with_phases(Phase.SCHEDULER_ACK, now=now).model_copy(
        update={"status": final_status(journal), "ended_at": now}
    )
    write_journal_unfenced(layout, journal, sync_dir=False)
    return journal
