"""The stall ladder's rows: resume, a fresh session, a hand-off, a gate (:mod:`loopx.turn.stall`).

They stand between the host and settle rows and apply only while the
journal's outcome says the host stalled. A rung that runs a host writes the
ladder into the journal before the run starts (a crash during it makes the
host row run the same rung again: the envelope is derived from the
journal), then runs the host through the turn's process side, as often as
its bound allows. The lease shows the rung in force (``status``). The
hand-off row, for a goal that may hand off, turns the outcome into a
``wait`` that backs the account off, so the next turn runs on a fallback
account. The gate row turns the outcome into a ``needs_human`` result with the last output
and what was tried: the turn commits a gate, never a failure, and its
evidence ``host_stalled`` backs the account off like a 5xx.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import datetime

from loopx.accounts.handoff import handoffs_in_window
from loopx.accounts.handoffs import take_slot
from loopx.accounts.records import account_of
from loopx.errors import LoopxError
from loopx.log import get_logger
from loopx.model import utcnow
from loopx.root import Layout
from loopx.state import load_state
from loopx.turn.failures import FailureReason
from loopx.turn.journal import HostOutcome, TurnJournal, journal_files, read_journal, write_journal
from loopx.turn.protocol import HostResult
from loopx.turn.stall import (
    AUTOMATIC,
    RESUME_WINDOW,
    Rung,
    activity,
    at_gate,
    climbed,
    gate_result,
    handoff_result,
    last_lines,
    may_climb,
    may_hand_off,
    stall_cause,
)
from loopx.turn.steps.context import TurnContext
from loopx.usage import Usage

log = get_logger(__name__)


def cause_of(outcome: HostOutcome | None) -> str | None:
    """Why the outcome's run counts as stalled (None: it did not stall, or no host ran)."""
    if outcome is None:
        return None
    failure = outcome.failure
    return stall_cause(
        outcome.killed,
        failure.reason if failure is not None else None,
        failure.message if failure is not None else "",
    )


def stalled(ctx: TurnContext) -> bool:
    """The row applies: the host's outcome (not yet settled) says it stalled."""
    return ctx.journal is not None and cause_of(ctx.journal.outcome) is not None


def resume_session(ctx: TurnContext) -> TurnContext:
    """Rung 1: stop the host and resume its session with a short "continue" prompt."""
    return _stopped(ctx) if ctx.options.stopping else _climb(ctx, Rung.RESUME)


def fresh_session(ctx: TurnContext) -> TurnContext:
    """Rung 2: a fresh session in the same workdir, with the goal's state."""
    return _stopped(ctx) if ctx.options.stopping else _climb(ctx, Rung.FRESH)


def hand_off_stalled(ctx: TurnContext) -> TurnContext:
    """Rung 3: end the turn as a wait that sends the next turn to a fallback account."""
    if ctx.options.stopping:
        return _stopped(ctx)
    now = utcnow()
    resumes = resumes_in_window(ctx.layout, ctx.planned, now)
    if not may_hand_off(can_hand_off=_can_hand_off(ctx, now), resumes=resumes):
        return ctx  # the gate's row ends it
    return _end_ladder(ctx, Rung.HANDOFF, handoff_result)


def _can_hand_off(ctx: TurnContext, now: datetime) -> bool:
    """The goal may hand off and this turn runs on its own account (not already handed off)."""
    goal = ctx.goal
    if ctx.planned.plan.handoff is not None or not goal.handoff or not goal.fallback_accounts:
        return False
    cap = goal.max_handoffs_per_day
    handed = load_state(ctx.layout, goal.id).handed_off_at
    return cap is None or handoffs_in_window(handed, now=now) < cap


def gate_stall(ctx: TurnContext) -> TurnContext:
    """Rung 4: the outcome becomes a gate with the last output lines and what was tried."""
    if ctx.options.stopping:
        return _stopped(ctx)
    return _end_ladder(ctx, Rung.GATE, gate_result)


def _end_ladder(ctx: TurnContext, rung: Rung, result_of: Callable[..., HostResult]) -> TurnContext:
    """The stalled outcome replaced by ``rung``'s result (a hand-off's wait, the gate)."""
    journal = ctx.planned
    outcome = journal.outcome
    cause = cause_of(outcome)
    if outcome is None or cause is None:
        return ctx
    ladder = at_gate(
        journal.stall,
        cause=cause,
        stalled_at=outcome.ended_at,
        output=last_lines(outcome.stdout, outcome.stderr),
        rung=rung,
    )
    result = result_of(ladder, turn_key=journal.turn_key, goal_id=journal.goal_id)
    event = "stall_handoff" if rung is Rung.HANDOFF else "stall_gate"
    log.warning(event, stalls=len(ladder.seen), runs=len(ladder.runs) - 1)
    ended = outcome.model_copy(update={"killed": None, "failure": None, "result": result})
    return ctx.but(journal=journal.model_copy(update={"stall": ladder, "outcome": ended}))


def _stopped(ctx: TurnContext) -> TurnContext:
    """A stop came while the host was stalled: the turn ends ``stopped``, as a stopped host's does."""
    journal = ctx.planned
    assert journal.outcome is not None  # noqa: S101 - the row applies to a stalled outcome only
    log.info("stall_ladder_stopped")
    stopped = journal.outcome.model_copy(update={"killed": FailureReason.STOPPED})
    return ctx.but(journal=journal.model_copy(update={"outcome": stopped}))


def _climb(ctx: TurnContext, rung: Rung) -> TurnContext:
    """Run ``rung``'s host while the outcome is stalled and the rung's bounds allow."""
    journal = ctx.planned
    while (cause := cause_of(journal.outcome)) is not None:
        outcome = journal.outcome
        assert outcome is not None  # noqa: S101 - cause_of found a stall in it
        now = utcnow()
        resumes = resumes_in_window(ctx.layout, journal, now)
        timeout = journal.plan.turn_timeout_s
        if not may_climb(journal.stall, rung, now=now, resumes=resumes, turn_timeout_s=timeout):
            break
        if not _resume_slot(ctx, journal, now):
            break  # the account's --max-resumes in its window: the next rung decides
        ladder = climbed(
            journal.stall,
            rung,
            cause=cause,
            stalled_at=outcome.ended_at,
            session=outcome.session,
            output=last_lines(outcome.stdout, outcome.stderr),
            now=now,
        )
        spent = journal.usage
        journal = journal.model_copy(update={"stall": ladder, "outcome": None, "updated_at": now})
        write_journal(ctx.layout, journal, ctx.fence)
        log.warning("host_stalled", rung=rung.value, cause=cause, runs=ladder.runs_on(rung))
        journal = _run(ctx.but(journal=journal), rung)
        journal = journal.model_copy(update={"usage": _added(spent, journal.usage)})
    return ctx.but(journal=journal)


def _resume_slot(ctx: TurnContext, journal: TurnJournal, now: datetime) -> bool:
    """A slot of the account's ``max_resumes`` taken for one more run (no cap: always)."""
    account = account_of(journal.plan.account, journal.plan.host_kind)
    try:
        return take_slot(ctx.layout, account, journal.goal_id, now=now, kind="resumes")
    except LoopxError as e:  # its policy damaged: no automatic resume on it until repaired
        log.warning("resume_slot_unusable", account=account, error=e.message)
        return False


def _run(ctx: TurnContext, rung: Rung) -> TurnJournal:
    """Run the host for ``rung`` with the lease showing the rung in force."""
    holder = ctx.claimed.holder
    holder.activity = activity(rung)
    holder.renew()
    try:
        return ctx.processes.run_host(ctx)
    finally:
        holder.activity = None


def resumes_in_window(layout: Layout, journal: TurnJournal, now: datetime) -> int:
    """Automatic resumes of the goal in the last 24 hours: this turn's and its other journals'.

    Only journals changed within the window are read (one ``stat`` each otherwise).
    """
    since = (now - RESUME_WINDOW).timestamp()
    count = _resumes(journal, since=0.0)
    for path in journal_files(layout, journal.goal_id):
        if path.name == f"{journal.turn_key}.json":
            continue
        try:
            if os.stat(path).st_mtime < since:
                continue
            other = read_journal(path)
        except (OSError, LoopxError):
            continue  # gone meanwhile, or damaged: recovery and doctor report it
        count += _resumes(other, since=since)
    return count


def _resumes(journal: TurnJournal, *, since: float) -> int:
    if journal.stall is None:
        return 0
    return sum(1 for r in journal.stall.runs if r.rung in AUTOMATIC and r.at.timestamp() >= since)


def _added(a: Usage, b: Usage) -> Usage:
    """What two host runs of one turn spent together."""
    return b.model_copy(
        update={
            "cpu_s": a.cpu_s + b.cpu_s,
            "wall_s": a.wall_s + b.wall_s,
            "peak_rss_mb": max(a.peak_rss_mb, b.peak_rss_mb),
            "input_tokens": a.input_tokens + b.input_tokens,
            "output_tokens": a.output_tokens + b.output_tokens,
            "cost_usd": a.cost_usd + b.cost_usd,
        }
    )
