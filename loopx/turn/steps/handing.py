"""The hand-off step: which account runs this turn, the goal's own or a fallback.

It runs before the account step, which then admits the chosen account as
it would the goal's own. The choice is pure
(:func:`loopx.accounts.handoff.choose_account`); this row gathers its
inputs: the states of the goal's accounts as admission reads them (nothing
written), the goal's recent hand-offs, and what of its last turn is pending:
a journal that did not commit after its host ran, or uncommitted changes in
the turn's directory (``git status``, which takes no lock), and which fallbacks took their
``max_handoffs`` (the one write: a slot taken on the chosen one). A hand-off hands
the next rows the goal as it runs on the fallback (that account and host
kind; the goal's host flags only when the kind is the same) and the
:class:`~loopx.accounts.handoff.Handoff` the journal step writes into the
plan, with the note the fresh session is told. A retried host (its journal
exists) runs on the account its plan names: the decision is never made twice.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Final

from loopx import git
from loopx.accounts.accountfiles import HeldAccount, account_host_kind, held_account
from loopx.accounts.handoff import Handoff, accounts_of, choose_account
from loopx.accounts.handoffs import at_cap, take_slot
from loopx.accounts.records import is_default
from loopx.accounts.rules import account_admits
from loopx.errors import LoopxError
from loopx.log import get_logger
from loopx.model import utcnow
from loopx.registry.goalrecords import Goal, HostSpec
from loopx.root import Layout
from loopx.state import load_state
from loopx.turn.failures import FailureReason
from loopx.turn.journal import TurnJournal, newest_journal, read_journal
from loopx.turn.outcome import TurnStatus
from loopx.turn.steps.context import TurnContext

log = get_logger(__name__)

COMMITS_SHOWN: Final = 20  # the branch's newest commits a fresh session is told of


def may_hand_off(ctx: TurnContext) -> bool:
    """The row applies: the goal names fallbacks and is not pinned, or its journal handed off."""
    if ctx.journal is not None and ctx.journal.plan.handoff is not None:
        return True
    return ctx.goal.handoff and bool(ctx.goal.fallback_accounts)


def hand_off(ctx: TurnContext) -> TurnContext:
    """The turn on the goal's own account, or handed off to the first fallback that admits it.

    Raises:
        LoopxError: a file of the goal's own account cannot be opened (a bad name).
    """
    if ctx.journal is not None:  # a retried host: on the account its journal planned
        planned = ctx.journal.plan.handoff
        return (
            ctx
            if planned is None
            else ctx.but(goal=handed_goal(ctx.goal, planned), handoff=planned)
        )
    goal, now = ctx.goal, utcnow()
    names = accounts_of(goal)
    own = held_account(ctx.layout, names[0])
    if account_admits(own.state, goal.id, now=now, policy=own.policy, priority=goal.priority):
        return ctx  # the common case: nothing more is read
    states, kinds, full = _fallbacks(ctx.layout, names[1:], now=now)
    states[names[0]] = own
    handed_off_at = load_state(ctx.layout, goal.id).handed_off_at
    pending = pending_of(ctx.layout, goal)
    while True:
        choice = choose_account(
            goal, states=states, kinds=kinds, handed_off_at=handed_off_at, pending=pending,
            now=now, full=full,
        )  # fmt: skip
        if not choice.handed_off:
            log.info("handoff_held", reason=choice.reason.value, message=choice.message)
            return ctx
        if _took_slot(ctx.layout, choice.account, goal.id, now=now):
            break
        full.add(choice.account)  # another goal took its last slot meanwhile
    handoff = Handoff(
        from_account=names[0],
        from_kind=goal.host.kind,
        to_account=choice.account,
        to_kind=choice.host_kind,
        why=choice.message,
        commits=branch_commits(goal),
        decided_at=now,
    )
    log.info("turn_handed_off", account=choice.account, host_kind=choice.host_kind)
    return ctx.but(goal=handed_goal(goal, handoff), handoff=handoff)


def _fallbacks(
    layout: Layout, names: list[str], *, now: datetime
) -> tuple[dict[str, HeldAccount], dict[str, str], set[str]]:
    """The fallbacks as admission reads them (state, policy, host kind), and those at their cap."""
    states: dict[str, HeldAccount] = {}
    kinds: dict[str, str] = {}
    full: set[str] = set()
    for name in names:
        try:
            kinds[name] = account_host_kind(layout, name)
            if at_cap(layout, name, now=now):
                full.add(name)
        except LoopxError as e:  # removed or damaged: not tried
            log.warning("handoff_account_unusable", account=name, error=e.message)
            continue
        states[name] = held_account(layout, name)
    return states, kinds, full


def _took_slot(layout: Layout, name: str, goal_id: str, *, now: datetime) -> bool:
    try:
        return take_slot(layout, name, goal_id, now=now)
    except LoopxError as e:
        log.warning("handoff_account_unusable", account=name, error=e.message)
        return False


def handed_goal(goal: Goal, handoff: Handoff) -> Goal:
    """The goal as its handed-off turn runs it: on the fallback's account and host kind. Pure."""
    same = handoff.to_kind == goal.host.kind
    host = (
        goal.host
        if same
        else HostSpec(kind=handoff.to_kind, session_max_turns=goal.host.session_max_turns)
    )
    account = None if is_default(handoff.to_account) else handoff.to_account
    return goal.model_copy(update={"account": account, "host": host})


def last_turn_pending(journal: TurnJournal | None) -> str | None:
    """What of the goal's last turn is not settled (None: nothing). Pure.

    A turn in flight is; one that committed is not, nor one whose host never
    ran or whose account refused its credentials (nothing was done).
    """
    if journal is None or journal.status is TurnStatus.COMMITTED:
        return None
    if journal.status is TurnStatus.IN_PROGRESS:
        return f"its turn {journal.turn_key} is in flight"
    failure = journal.failure
    if journal.outcome is None or (
        failure is not None and failure.reason is FailureReason.HOST_AUTH
    ):
        return None
    why = f" ({failure.reason.value})" if failure is not None else ""
    return f"its last turn {journal.turn_key} ended {journal.status.value}{why}"


def pending_of(layout: Layout, goal: Goal) -> str | None:
    """What of the goal's last turn is pending: an unsettled journal, uncommitted changes."""
    newest = newest_journal(layout, goal.id)
    try:
        journal = read_journal(newest) if newest is not None else None
    except (LoopxError, OSError):
        return "its last turn's journal cannot be read"
    pending = last_turn_pending(journal)
    if pending is not None:
        return pending
    changed = _uncommitted(Path(goal.workdir))
    if changed:
        return f"{len(changed)} uncommitted change(s) in {goal.workdir} (e.g. {changed[0]})"
    return None


def _uncommitted(where: Path) -> list[str]:
    """The uncommitted paths under ``where`` (empty: clean, or not in a git repository)."""
    try:
        if not where.is_dir() or git.toplevel(where) is None:
            return []
        done = git.run(where, "status", "--porcelain", "--untracked-files=all", "--", ".")
    except (LoopxError, OSError):
        return ["(git status failed)"]
    return [line[3:] for line in done.stdout.splitlines() if line]


def branch_commits(goal: Goal) -> list[str]:
    """The branch's newest commits, one line each (a worktree's: those its base lacks)."""
    where = Path(goal.workdir)
    try:
        if not where.is_dir() or git.toplevel(where) is None:
            return []
        span = [f"{goal.worktree.base}..HEAD"] if goal.worktree is not None else ["HEAD"]
        done = git.run(where, "log", "--oneline", "-n", str(COMMITS_SHOWN), *span, check=False)
    except (LoopxError, OSError):
        return []
    return done.stdout.splitlines() if done.returncode == 0 else []
