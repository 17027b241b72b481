"""The journal step: the turn's plan, durable before its host runs.

A new turn's journal is created (``in_progress``) with the plan: the
envelope, the host's argv, the quota decision, the account's policy and
the epoch; ``turn_key`` is derived from goal id, sequence number and epoch.
A host run again under a journal an earlier attempt left is counted
(``attempt`` + 1) in that journal instead. Either way the agent learns the
turn's key (its heartbeat shows it) before the host starts.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import structlog

from loopx import __version__
from loopx.accounts.handoff import Handoff, handoff_note
from loopx.accounts.observation import OVERLOADS_FOR_GATE
from loopx.accounts.records import Account
from loopx.model import utcnow
from loopx.quota.decision import QuotaDecision
from loopx.registry.goalrecords import Goal
from loopx.root import Layout
from loopx.root.dropbox import result_path
from loopx.state import GoalState, load_state
from loopx.turn.journal import (
    TurnJournal,
    TurnPlan,
    create_journal,
    last_seq,
    make_turn_key,
    write_journal,
)
from loopx.turn.lease import Lease
from loopx.turn.protocol import Envelope
from loopx.turn.steps.context import TurnContext


def open_journal(ctx: TurnContext) -> TurnContext:
    """Create the new turn's journal, or count the retried host's attempt in the pending one.

    Raises:
        LeaseLostError: the claim was taken over.
        JournalExistsError: a journal with the new turn's key exists.
    """
    claim = ctx.claimed
    if ctx.journal is None:
        assert ctx.decision is not None  # noqa: S101 - the quota step ran: the table's order
        journal = plan_turn(
            ctx.layout,
            ctx.goal,
            claim.lease,
            ctx.decision,
            ctx.account,
            now=utcnow(),
            handoff=ctx.handoff,
        )
        create_journal(ctx.layout, journal, claim.fence)
        started = journal.created_at
    else:
        journal = ctx.journal.model_copy(
            update={"attempt": ctx.journal.attempt + 1, "updated_at": utcnow()}
        )
        write_journal(ctx.layout, journal, claim.fence)
        started = journal.updated_at
    structlog.contextvars.bind_contextvars(turn_key=journal.turn_key)  # unbound by the release
    ctx.processes.turn_started(journal.turn_key, started)
    return ctx.but(journal=journal)


def plan_turn(
    layout: Layout,
    goal: Goal,
    lease: Lease,
    decision: QuotaDecision,
    account: Account | None,
    *,
    now: datetime,
    handoff: Handoff | None = None,
) -> TurnJournal:
    """The journal of the goal's next turn under ``lease``, not yet written. Reads the state.

    ``handoff``: the turn runs on a fallback account (``goal`` is as it runs there).
    """
    state = load_state(layout, goal.id)
    seq = max(state.turn_seq, last_seq(layout, goal.id)) + 1
    turn_key = make_turn_key(goal.id, seq, lease.epoch)
    envelope = Envelope(
        goal_id=goal.id,
        turn_key=turn_key,
        seq=seq,
        epoch=lease.epoch,
        objective=goal.objective,
        workdir=goal.workdir,
        root=str(layout.root),
        result_file=str(result_path(layout, goal.id, turn_key)),
        turn_timeout_s=goal.quota.turn_timeout_s,
        deadline_at=now + timedelta(seconds=goal.quota.turn_timeout_s),
        state=state,
        handoff=handoff_note(handoff) if handoff is not None else None,
    )
    plan = _turn_plan(goal, envelope, decision, account, state=state, handoff=handoff)
    return TurnJournal(
        loopx_version=__version__,
        goal_id=goal.id,
        agent_id=lease.agent_id,
        turn_key=turn_key,
        seq=seq,
        epoch=lease.epoch,
        plan=plan,
        created_at=now,
        updated_at=now,
    )


def _turn_plan(
    goal: Goal,
    envelope: Envelope,
    decision: QuotaDecision,
    account: Account | None,
    *,
    state: GoalState,
    handoff: Handoff | None,
) -> TurnPlan:
    """The plan of the turn: the goal's host and bounds, the account's limits where the goal has none."""
    waits = goal.max_limit_waits
    return TurnPlan(
        envelope=envelope,
        host_kind=goal.host.kind,
        argv=list(goal.host.argv),
        quota=decision,
        max_host_attempts=goal.max_host_attempts,
        turn_timeout_s=goal.quota.turn_timeout_s,
        max_rss_mb=goal.quota.max_rss_mb,
        prior_failures=state.consecutive_failures,
        done_check=goal.done_check,
        account=goal.account,
        on_limit=goal.on_limit or (account.on_limit if account is not None else "wait"),
        max_limit_waits=waits
        if waits is not None
        else (account.max_limit_waits if account is not None else None),
        max_overloads=account.max_overloads if account is not None else OVERLOADS_FOR_GATE,
        handoff=handoff,
        may_hand_off=goal.handoff and bool(goal.fallback_accounts),
        sandbox=goal.sandbox,
    )
