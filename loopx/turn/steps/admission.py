"""The quota and account steps: whether this goal may start a host now.

The quota decides from the goal's budget and the machine's headroom
(:func:`loopx.quota.decision.decide`); the account from its provider
limits, budgets and gates (:func:`loopx.accounts.accountstore.admit_turn`). A
refusal is a wait, never a failure: the goal runs once the reason passes.
A host retried into a parked account would only meet the limit again, so a
retry asks the account of its journal's plan too.
"""

from __future__ import annotations

from loopx.accounts.accountfiles import load_account
from loopx.accounts.accountstore import admit_turn, refused_by_account
from loopx.accounts.records import account_of
from loopx.log import get_logger
from loopx.model import utcnow
from loopx.quota.decision import decide
from loopx.turn.steps.context import Stop, StopKind, TurnContext

log = get_logger(__name__)


def check_quota(ctx: TurnContext) -> TurnContext | Stop:
    """The goal's quota decision, or a wait: refused, or a stop requested before a host."""
    decision = decide(ctx.layout, ctx.goal, now=utcnow(), leased=False)
    if not decision.allowed:
        log.info("turn_refused", reason=decision.reason)
        return Stop(StopKind.WAIT, "quota", quota=decision)
    if ctx.options.stopping:
        return Stop(StopKind.WAIT, "stopping", quota=decision)
    return ctx.but(decision=decision)


def admit_account(ctx: TurnContext) -> TurnContext | Stop:
    """The account's admission of a new turn (or of a retried host), or a wait.

    Raises:
        AccountNotFoundError: the goal names an account that was removed.
    """
    goal, journal = ctx.goal, ctx.journal
    if journal is not None:  # a retried host: the account and quota its journal planned
        plan = journal.plan
        name, timeout_s, decision = (
            account_of(plan.account, plan.host_kind),
            plan.turn_timeout_s,
            plan.quota,
        )
        account = None
    else:
        name, timeout_s, decision = (
            account_of(goal.account, goal.host.kind),
            goal.quota.turn_timeout_s,
            ctx.decision,
        )
        account = load_account(ctx.layout, name) if goal.account is not None else None
    admission = admit_turn(
        ctx.layout, name, goal.id, now=utcnow(), turn_timeout_s=timeout_s, priority=goal.priority
    )
    if admission.allowed or decision is None:
        return ctx.but(account=account)
    refusal = refused_by_account(decision, admission)
    if journal is None:
        log.info("turn_refused", reason=refusal.reason)
    return Stop(StopKind.WAIT, "account", quota=refusal)
