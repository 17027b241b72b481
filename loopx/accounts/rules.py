"""The account rules, pure: may a goal of the account start a turn.

:func:`admit` refuses, in this order (the first that applies is the answer):

1. ``damaged``: a file of the account cannot be read (the state
   :func:`~loopx.accounts.accountfiles.damaged_state` stands for); only a repair
   clears it, since what the file held (a limit, a gate, a spent budget) is
   not known.
2. ``login refused`` (an auth failure: a new login clears it) or ``needs a
   human``: the account has an open gate (N overloads in a row, a limit under
   the ``gate`` policy, too many limit waits, a spent budget); no time clears it.
3. ``limited``: a usage limit, until its reset; a limit without one (a bare
   429) until a backoff of ``RATE_LIMIT_BASE_S`` doubling per hit in a row to
   ``RATE_LIMIT_MAX_S``.
4. ``overloaded``: the model server's overload, until a short backoff ends.
5. ``past the mark``: a provider window the account's turns reported is at
   or past the account's admission mark (``--admit-until``, 95% unless set),
   until that window resets; goals above ``--admit-past-priority`` still
   start. Without a reported window nothing is held here.
6. ``probing``: after a reset (or before the account's first turn got
   through) one goal goes first; the others wait for its turn to end, or for
   its hold to run out if it died.
7. ``staggered``: after a probe got through, the other goals start one every
   ``STAGGER_S`` for ``STAGGER_WINDOW_S``.

:func:`parked` holds the first five refusals (what holds every goal of the
account), and :func:`account_admits` is the question a hand-off asks of each
account. What a turn teaches the account (its state after the turn's signal)
is :mod:`loopx.accounts.observation`'s.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Final

from loopx.accounts.records import (
    AccountState,
    Admission,
    Condition,
)
from loopx.accounts.windows import AdmissionPolicy, counts_until, label, past_mark
from loopx.model import iso_utc

# After a probe got through, one more goal starts every this many seconds (for
# observation.STAGGER_WINDOW_S).
STAGGER_S: Final = 2.0
PROBE_GRACE_S: Final = 60.0  # a probe's hold lasts its turn timeout plus this


def _clock(at: datetime) -> str:
    return f"{at:%H:%M:%S}" if at.tzinfo is not None else iso_utc(at, "seconds")


def limited_message(name: str, state: AccountState) -> str:
    """The words of a limit: ``account NAME limited until 19:05:34 UTC (seen by goal G, turn T)``.

    Without a reset from the provider: ``account NAME rate limited, retry at 19:05:34 UTC (...)``.
    """
    clock = f"{_clock(state.until)} UTC" if state.until is not None else ""
    seen = (
        f" (seen by goal {state.seen_by_goal}, turn {state.seen_by_turn})"
        if state.seen_by_goal
        else ""
    )
    if state.reset_unknown:
        return f"account {name} rate limited{', retry at ' + clock if clock else ''}{seen}"
    return f"account {name} limited{' until ' + clock if clock else ''}{seen}"


def damaged_message(name: str, state: AccountState) -> str:
    """The words of a damaged account: ``account NAME waits for a repair: PATH is damaged: ...``."""
    who = "the root's budget" if name.startswith(".") else f"account {name}"
    return f"{who} waits for a repair: {state.reason} (see `loopx doctor`)"


def _of_gate(state: AccountState) -> str:
    return f"; a gate at {state.max_overloads}" if state.max_overloads is not None else ""


def mark_admission(
    name: str, state: AccountState, policy: AdmissionPolicy, now: datetime
) -> Admission:
    """The refusal of an account with a window past its mark, or an allowance. Pure.

    ``account work: 5-hour window at 96%, resets 14:05 UTC``: the window named is
    the one that resets last (the goals wait until every window past the mark reset).
    """
    over = past_mark(state.windows, policy, now=now)
    if not over:
        return Admission(allowed=True)
    first = over[0]
    resets = f", resets {first.resets_at:%H:%M} UTC" if first.resets_at is not None else ""
    more = f" (and {len(over) - 1} more)" if len(over) > 1 else ""
    return Admission(
        allowed=False,
        message=f"account {name}: {label(first)} window at {first.used_percent:.0f}%{resets}{more}",
        until=counts_until(first),
    )


def parked(  # noqa: PLR0911 - one return per refusal of the module's order
    state: AccountState,
    *,
    now: datetime,
    policy: AdmissionPolicy | None = None,
    priority: int | None = None,
) -> Admission | None:
    """The refusal of a parked account, or None. Pure.

    Damaged, a gate, a limit, an overload, a window past its mark: the first
    five refusals of the module's order, each holding every goal of the account
    until a repair, a human, a reset or a backoff ends it. ``policy`` is the
    account's admission policy (None: the default, 95% of every window);
    ``priority`` the goal's (None: a goal no ``--admit-past-priority`` lets past).
    """
    name = state.name
    if state.condition is Condition.DAMAGED:
        return Admission(allowed=False, message=damaged_message(name, state))
    if state.gate is not None and state.login_refused:
        return Admission(allowed=False, message=state.gate.question)
    if state.gate is not None:
        who = "the root's budget" if name.startswith(".") else f"account {name}"
        spent = state.condition is Condition.BUDGET_SPENT
        return Admission(
            allowed=False,
            message=f"{who} {'is spent' if spent else 'needs a human'}: {state.gate.question}",
            until=state.until if spent else None,  # a budget refills by itself then
        )
    if state.condition is Condition.LIMITED and state.until is not None and now < state.until:
        return Admission(allowed=False, message=limited_message(name, state), until=state.until)
    if state.condition is Condition.OVERLOADED and state.until is not None and now < state.until:
        return Admission(
            allowed=False,
            message=f"account {name} overloaded until {_clock(state.until)} UTC "
            f"({state.overloads} in a row{_of_gate(state)})",
            until=state.until,
        )
    policy = policy if policy is not None else AdmissionPolicy()
    if state.windows and not policy.lets_past(priority):
        marked = mark_admission(name, state, policy, now)
        if not marked.allowed:
            return marked
    return None


def admit(
    state: AccountState,
    goal_id: str,
    *,
    now: datetime,
    policy: AdmissionPolicy | None = None,
    priority: int | None = None,
) -> Admission:
    """Whether a turn of ``goal_id`` may start now on the account in ``state``. Pure.

    See the module docstring for the order of the refusals; ``policy`` and
    ``priority`` as for :func:`parked`.
    """
    name = state.name
    refusal = parked(state, now=now, policy=policy, priority=priority)
    if refusal is not None:
        return refusal
    if state.condition is not Condition.OK or not state.proven:
        held = state.probe_goal is not None and state.probe_until is not None
        if held and state.probe_goal != goal_id and now < state.probe_until:  # type: ignore[operator]
            return Admission(
                allowed=False,
                message=f"account {name}: goal {state.probe_goal} goes first as a probe",
                until=state.probe_until,
            )
        return Admission(allowed=True, message=f"account {name}: probe", take_probe=True)
    if state.stagger_until is not None and now < state.stagger_until:
        if state.next_start_at is not None and now < state.next_start_at:
            return Admission(
                allowed=False,
                message=f"account {name}: staggered start after its reset",
                until=state.next_start_at,
            )
        return Admission(allowed=True, take_stagger=True)
    return Admission(allowed=True)


def same_admission(
    before: tuple[AccountState, AdmissionPolicy],
    after: tuple[AccountState, AdmissionPolicy],
    *,
    now: datetime,
) -> bool:
    """Whether every goal is admitted alike under ``before`` and ``after`` (state, policy). Pure.

    Most turns change only the window reports (their utilization rises a
    little below the mark): the scheduler then need not look at the account's
    goals again, so a turn's cost does not grow with the goals of its account.
    """
    (state_a, policy_a), (state_b, policy_b) = before, after
    ignored: dict[str, object] = {"windows": [], "updated_at": None}
    return (
        policy_a == policy_b
        and state_a.model_copy(update=ignored) == state_b.model_copy(update=ignored)
        and mark_admission(state_a.name, state_a, policy_a, now)
        == mark_admission(state_b.name, state_b, policy_b, now)
    )


def account_admits(
    state: AccountState,
    goal_id: str,  # noqa: ARG001 - part of the predicate's contract
    *,
    now: datetime,
    policy: AdmissionPolicy | None = None,
    priority: int | None = None,
) -> bool:
    """Whether the account in ``state`` admits turns now: it is not parked. Pure.

    The one predicate hand-off chooses accounts by (:mod:`loopx.accounts.handoff`):
    every refusal of :func:`parked` counts (damaged, a gate or a refused
    login, a limit, an overload, a window past its mark), so a refusal added
    there counts here too. A probe or a
    staggered start after a reset is a wait of seconds, not a refusal: no
    turn is handed off for it. ``goal_id``: the goal asking, for refusals
    that depend on it.
    """
    return parked(state, now=now, policy=policy, priority=priority) is None


def taken(
    state: AccountState, admission: Admission, goal_id: str, *, now: datetime, turn_timeout_s: float
) -> AccountState:
    """The state after an admission that must be recorded (a probe or a staggered start). Pure."""
    if admission.take_probe:
        hold = now + timedelta(seconds=turn_timeout_s + PROBE_GRACE_S)
        return state.model_copy(
            update={"probe_goal": goal_id, "probe_until": hold, "updated_at": now}
        )
    if admission.take_stagger:
        return state.model_copy(
            update={"next_start_at": now + timedelta(seconds=STAGGER_S), "updated_at": now}
        )
    return state
