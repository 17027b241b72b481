"""Hand-off, pure: which account runs a goal's next turn.

A goal runs on its own account (or its host kind's default) and names, in
order, fallback accounts of any host kind (``fallback_accounts``).
:func:`choose_account` answers, the first rule that applies:

1. ``own``: its own account admits the turn
   (:func:`~loopx.accounts.rules.account_admits`): it runs there, so after
   the reset a goal handed off is back on its own account at its next turn;
2. ``pinned``: the goal says ``handoff`` false (`--no-handoff`), or names no
   fallback: it stays, and the account step says why it waits;
3. ``capped``: its handed-off turns in the last 24 hours reached
   ``max_handoffs_per_day``: it stays;
4. ``pending``: something of its last turn is not settled (a turn in
   flight, a turn that did not commit, uncommitted changes in its workdir):
   it stays, since a fresh session elsewhere would not know of it;
5. ``handed_off``: the first fallback that admits it (and has not taken its
   ``max_handoffs`` in its window: ``full``) runs the turn;
6. ``none_admits``: no fallback admits it either: it stays.

:func:`handoffs_in_window` counts the hand-offs the cap is checked against.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Final

from pydantic import Field

from loopx.accounts.accountfiles import HeldAccount
from loopx.accounts.records import account_of
from loopx.accounts.rules import account_admits, parked
from loopx.model import Record, UtcDatetime
from loopx.registry.goalrecords import Goal

HANDOFF_WINDOW: Final = timedelta(hours=24)  # the per-goal cap counts hand-offs in this window
HANDOFF_TIMES_KEPT: Final = 1000  # hand-off times a goal state keeps (the cap's evidence)


class ChoiceReason(StrEnum):
    """Why :func:`choose_account` chose as it did (the module docstring's rules)."""

    OWN = "own"
    PINNED = "pinned"
    CAPPED = "capped"
    PENDING = "pending"
    HANDED_OFF = "handed_off"
    NONE_ADMITS = "none_admits"


class AccountChoice(Record):
    """The account a turn runs on, and why."""

    account: str
    host_kind: str
    reason: ChoiceReason
    message: str = ""  # the own account's refusal, or why the goal stays

    @property
    def handed_off(self) -> bool:
        """Whether the turn runs on a fallback account."""
        return self.reason is ChoiceReason.HANDED_OFF


class Handoff(Record):
    """A handed-off turn's decision, journaled in its plan (what the turn ran on, and why)."""

    from_account: str
    from_kind: str
    to_account: str
    to_kind: str
    why: str  # the goal's own account's refusal
    # What the fresh session is told besides the goal state: the branch's commits.
    commits: list[str] = Field(default_factory=list)
    decided_at: UtcDatetime


def accounts_of(goal: Goal) -> list[str]:
    """The goal's own account, then its fallbacks, in the order they are tried."""
    own = account_of(goal.account, goal.host.kind)
    return [own, *(name for name in goal.fallback_accounts if name != own)]


def handoffs_in_window(times: Sequence[datetime], *, now: datetime) -> int:
    """How many of the hand-off ``times`` fall in the window ``(now - 24 h, now]``. Pure."""
    start = now - HANDOFF_WINDOW
    return sum(1 for at in times if start < at <= now)


def choose_account(
    goal: Goal,
    *,
    states: Mapping[str, HeldAccount],
    kinds: Mapping[str, str],
    handed_off_at: Sequence[datetime],
    pending: str | None,
    now: datetime,
    full: Collection[str] = (),
) -> AccountChoice:
    """The account the goal's next turn runs on (the module docstring's rules). Pure.

    Args:
        goal: the goal as registered (its own account, fallbacks, pin and cap).
        states: the state and admission policy of each of the goal's accounts as
            admission reads them;
            an account missing here (removed, unreadable) is not tried.
        kinds: the host kind of each fallback account.
        handed_off_at: when the goal's earlier hand-offs were decided.
        pending: what of the last turn is not settled (None: nothing).
        now: the decision's time.
        full: the fallbacks that took their ``max_handoffs`` in their window.

    """
    own = account_of(goal.account, goal.host.kind)
    own_held = states.get(own)
    stay = AccountChoice(account=own, host_kind=goal.host.kind, reason=ChoiceReason.OWN)
    if own_held is None or _admits(own_held, goal, now=now):
        return stay
    refusal = parked(own_held.state, now=now, policy=own_held.policy, priority=goal.priority)
    why = refusal.message if refusal is not None else f"account {own} does not admit it"
    if not goal.handoff or not goal.fallback_accounts:
        return stay.model_copy(update={"reason": ChoiceReason.PINNED, "message": why})
    cap = goal.max_handoffs_per_day
    if cap is not None and handoffs_in_window(handed_off_at, now=now) >= cap:
        message = f"{why}; no hand-off: {cap} handed-off turns in 24 hours (--max-handoffs-per-day)"
        return stay.model_copy(update={"reason": ChoiceReason.CAPPED, "message": message})
    if pending is not None:
        message = f"{why}; no hand-off: {pending}"
        return stay.model_copy(update={"reason": ChoiceReason.PENDING, "message": message})
    for name in accounts_of(goal)[1:]:
        held, kind = states.get(name), kinds.get(name)
        if held is None or kind is None or name in full:
            continue
        if _admits(held, goal, now=now):
            return AccountChoice(
                account=name, host_kind=kind, reason=ChoiceReason.HANDED_OFF, message=why
            )
    message = f"{why}; no fallback account admits it either"
    return stay.model_copy(update={"reason": ChoiceReason.NONE_ADMITS, "message": message})


def _admits(held: HeldAccount, goal: Goal, *, now: datetime) -> bool:
    return account_admits(held.state, goal.id, now=now, policy=held.policy, priority=goal.priority)


def handoff_note(handoff: Handoff) -> str:
    """What the fresh session of a handed-off turn is told of the hand-off. Pure."""
    lines = [
        (
            f"This goal's turns run on account {handoff.from_account} ({handoff.from_kind}), "
            f"which does not admit it now ({handoff.why}). This turn runs on account "
            f"{handoff.to_account} ({handoff.to_kind}) in a fresh session: you have no memory "
            "of the earlier turns beyond the goal state below and the working directory itself."
        )
    ]
    if handoff.commits:
        commits = "\n".join(f"- {line}" for line in handoff.commits)
        lines.append(f"The branch's commits so far (newest first):\n{commits}")
    return "\n".join(lines)
