"""The turn as a table of steps: the whole turn, claim to release, is :data:`STEPS`.

Each row names a step, the function that runs it over the
:class:`~loopx.turn.steps.context.TurnContext`, when it applies, and what in
the journal says it is done. :func:`run_steps` walks the rows in order:

* a row that does not apply to this turn (no worktree, no check due, no
  auto-merge) is skipped by its ``applies``, never by a branch inside another step;
* a row the journal already records (``done``) is skipped: resuming a turn an
  earlier attempt left enters the list at the first step its journal has not
  recorded, and nothing is decided twice. A row without ``done`` is one of the
  claim's own (the lease, the workdir) and runs at every claim;
* a row returns the next context, or a :class:`~loopx.turn.steps.context.Stop`
  (wait, gate, lost, stopped) after which only the ``always`` rows run (the
  releases), as they do after an error, which is raised once they ran;
* every row that runs is bracketed by the fault points ``before:<name>`` and
  ``after:<name>`` (:func:`fault_points`): a new row gets its own for free.

Adding a step is adding a row here and the step's function in a module of its
own (docs/architecture.md, "Adding a step").
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import structlog

from loopx import tracing
from loopx.errors import LeaseLostError
from loopx.faults import fault_point
from loopx.log import get_logger
from loopx.turn.attempt import TurnAttempt
from loopx.turn.journal import Phase, TurnJournal, newest_journal
from loopx.turn.outcome import TurnStatus
from loopx.turn.steps.admission import admit_account, check_quota
from loopx.turn.steps.checking import check_due, run_check
from loopx.turn.steps.claim import claim_lease, release_lease
from loopx.turn.steps.committing import commit
from loopx.turn.steps.context import Stop, StopKind, TurnContext
from loopx.turn.steps.handing import hand_off, may_hand_off
from loopx.turn.steps.hosting import run_host, settle_outcome
from loopx.turn.steps.hostkind import admit_host_kind
from loopx.turn.steps.journaling import open_journal
from loopx.turn.steps.merging import auto_merges, merge_when_done
from loopx.turn.steps.recovering import finish_leftovers
from loopx.turn.steps.reporting import attempt_of
from loopx.turn.steps.sandboxing import close_sandbox, has_sandbox, open_sandbox, sandboxed
from loopx.turn.steps.stalling import (
    fresh_session,
    gate_stall,
    hand_off_stalled,
    resume_session,
    stalled,
)
from loopx.turn.steps.workplace import enter_worktree, hold_workdir, unlock_workdir

log = get_logger(__name__)

StepFunction = Callable[[TurnContext], "TurnContext | Stop"]


def every_turn(_ctx: TurnContext) -> bool:
    """The row applies to every turn."""
    return True


def recorded(name: str) -> Callable[[TurnJournal], bool]:
    """The journal records the step ``name`` in ``completed_steps`` (the default of a new row)."""

    def done(journal: TurnJournal) -> bool:
        return name in journal.completed_steps

    return done


@dataclass(frozen=True, slots=True)
class Step:
    """One row of the table."""

    name: str  # also its fault points' names: before:<name>, after:<name>
    run: StepFunction
    applies: Callable[[TurnContext], bool] = every_turn
    # What in the journal says the step is done (None: the claim's own, run at every claim).
    done: Callable[[TurnJournal], bool] | None = None
    always: bool = False  # runs after a stop or an error too (a release)

    def skipped(self, ctx: TurnContext) -> bool:
        """Whether the row does not run for this context: it does not apply, or is done."""
        if not self.applies(ctx):
            return True
        return self.done is not None and ctx.journal is not None and self.done(ctx.journal)


def _planned(_journal: TurnJournal) -> bool:
    return True  # a journal exists: its plan holds the quota decision


def _host_started(journal: TurnJournal) -> bool:
    return journal.done(Phase.HOST_EXECUTE)


def _has_worktree(ctx: TurnContext) -> bool:
    return ctx.goal.worktree is not None


def _claimed(ctx: TurnContext) -> bool:
    return ctx.claim is not None


def _in_workdir(ctx: TurnContext) -> bool:
    return ctx.workdir is not None


def _settled(journal: TurnJournal) -> bool:
    return journal.status.terminal or journal.done(Phase.VALIDATION)


def _checked(journal: TurnJournal) -> bool:
    return journal.done(Phase.DONE_CHECK) or journal.done(Phase.DURABLE_WRITEBACK)


def _terminal(journal: TurnJournal) -> bool:
    return journal.status is not TurnStatus.IN_PROGRESS


# claim -> leftovers -> workdir | worktree -> quota -> handoff -> account -> host_kind -> journal
# -> sandbox -> host -> settle -> check -> writeback (the phases) -> close_sandbox -> release
# -> merge (between host and settle, for a stalled host only: the stall ladder's rungs)
STEPS: tuple[Step, ...] = (
    Step("claim", claim_lease),
    Step("leftovers", finish_leftovers),
    Step("workdir", hold_workdir),
    Step("worktree", enter_worktree, applies=_has_worktree),
    Step("quota", check_quota, done=_planned),
    Step("handoff", hand_off, applies=may_hand_off, done=_host_started),
    Step("account", admit_account, done=_host_started),
    Step("host_kind", admit_host_kind, done=_host_started),
    Step("journal", open_journal, done=_host_started),
    Step("sandbox", open_sandbox, applies=sandboxed),  # before the host and the check
    Step("host", run_host, done=_host_started),
    Step("stall_resume", resume_session, applies=stalled, done=_settled),
    Step("stall_fresh", fresh_session, applies=stalled, done=_settled),
    Step("stall_handoff", hand_off_stalled, applies=stalled, done=_settled),
    Step("stall_gate", gate_stall, applies=stalled, done=_settled),
    Step("settle", settle_outcome, done=_settled),
    Step("check", run_check, applies=check_due, done=_checked),
    Step("writeback", commit, done=_terminal),
    Step("close_sandbox", close_sandbox, applies=has_sandbox, always=True),
    Step("unlock_workdir", unlock_workdir, applies=_in_workdir, always=True),
    Step("release", release_lease, applies=_claimed, always=True),
    Step("merge", merge_when_done, applies=auto_merges),
)


def fault_points(steps: Sequence[Step] = STEPS) -> Iterator[str]:
    """The fault points of every row, in the order a turn passes them."""
    for step in steps:
        yield f"before:{step.name}"
        yield f"after:{step.name}"


def run_steps(ctx: TurnContext, steps: Sequence[Step] = STEPS) -> tuple[TurnContext, Stop | None]:
    """Walk the table: the context at the end, and the stop that ended the turn early, if any.

    Raises:
        LoopxError: a damaged file or a lock timeout (once the releases ran).
        OSError: a write the machine refused (once the releases ran).
    """
    stop: Stop | None = None
    error: BaseException | None = None
    for step in steps:
        if (stop is not None or error is not None) and not step.always:
            continue
        if step.skipped(ctx):
            continue
        try:
            out = _run_step(step, ctx)
        except LeaseLostError as e:
            log.warning("lease_lost", held=e.held, current=e.current)
            stop = Stop(StopKind.LOST, "lease_lost", turn_key=_turn_key(ctx), message=e.message)
            continue
        except BaseException as e:  # noqa: BLE001 - raised below, once the releases ran
            error = error or e
            continue
        if isinstance(out, Stop):
            stop = stop or out
        else:
            ctx = out
    if error is not None:
        raise error
    return ctx, stop


def _run_step(step: Step, ctx: TurnContext) -> TurnContext | Stop:
    with tracing.span(step.name, {"loopx.step": step.name}) as span:
        fault_point(f"before:{step.name}")
        out = step.run(ctx)
        if isinstance(out, TurnContext) and step.done is not None and out.journal is not None:
            out = out.but(journal=out.journal.with_step(step.name))
        fault_point(f"after:{step.name}")
        _mark(span, out)
    return out


def _mark(span: tracing.Marks, out: TurnContext | Stop) -> None:
    """A step's outcome on its span: ``ok``, or the stop's kind and reason."""
    if isinstance(out, Stop):
        span.set("loopx.outcome", str(out.kind))
        span.set("loopx.stop_reason", out.reason)
        return
    span.set("loopx.outcome", "ok")
    if out.journal is not None:
        span.set("loopx.turn_key", out.journal.turn_key)


def _turn_key(ctx: TurnContext) -> str:
    """The key of the turn a lost lease cut short: its journal's, else the newest one's."""
    if ctx.journal is not None:
        return ctx.journal.turn_key
    newest = newest_journal(ctx.layout, ctx.goal.id)
    return newest.name.removesuffix(".json") if newest is not None else ""


def take_turn(ctx: TurnContext, steps: Sequence[Step] = STEPS) -> TurnAttempt:
    """One turn of ``ctx.goal`` through the table, and what came of it.

    Raises:
        GoalNotFoundError: the goal was removed meanwhile.
        LoopxError: a damaged file or a lock timeout.
        OSError: a write the machine refused before the host ran.
    """
    ids = {"loopx.goal_id": ctx.goal.id, "loopx.agent_id": ctx.agent_id}
    with (
        structlog.contextvars.bound_contextvars(goal_id=ctx.goal.id, agent_id=ctx.agent_id),
        tracing.span("turn", ids) as span,
    ):
        end, stop = run_steps(ctx, steps)
        _mark(span, stop or end)
        if end.journal is not None:
            span.set("loopx.turn_status", str(end.journal.status))
    if stop is not None:
        log.debug("turn_stopped", goal_id=ctx.goal.id, kind=stop.kind, reason=stop.reason)
    return attempt_of(end, stop)
