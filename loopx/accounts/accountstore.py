"""The account files under the root, and the shell around :mod:`loopx.accounts.rules`.

``accounts/<name>/account.json`` is written by `loopx account add|edit`;
``accounts/<name>/state.json`` by the turns, always under its lock
(:func:`update_state`), so agents that learn about the same account at once
never lose each other's change, and a turn's effect is fenced by its key. A
default account (``default-<kind>``) has a state file but no account file.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from datetime import datetime
from typing import Final

from loopx.accounts import observation, rules
from loopx.accounts.accountfiles import (
    account_file,
    admission_policy,
    budget_of,
    damaged_state,
    read_account,
    read_spend,
    read_state,
    root_budget_file,
    spend_file,
    state_file,
)
from loopx.accounts.records import (
    Account,
    AccountGate,
    AccountState,
    Admission,
    Condition,
    RootBudget,
    TurnSignal,
)
from loopx.accounts.rollingbudget import (
    ROOT_BUDGET,
    Breach,
    added,
    breach,
    estimated_cost,
)
from loopx.errors import AccountDamagedError
from loopx.faults import fault_point
from loopx.log import get_logger
from loopx.quota.decision import QuotaDecision, QuotaReason
from loopx.root import Layout
from loopx.root.hints import note_goal_changed
from loopx.storage.dirs import ensure_dir
from loopx.storage.files import atomic_write_model
from loopx.storage.locks import locked

BUDGET_GATE: Final = "budget"  # the opened_by of a budget's gate

log = get_logger(__name__)


# --- policy files -------------------------------------------------------------------------------


def write_account(layout: Layout, account: Account) -> None:
    """Write the account's policy file (0600 in a 0700 directory)."""
    path = account_file(layout, account.name)
    ensure_dir(path.parent)
    atomic_write_model(path, account)


def remove_account(layout: Layout, name: str) -> None:
    """Remove the account's directory (its policy and state)."""
    shutil.rmtree(account_file(layout, name).parent)


# --- state --------------------------------------------------------------------------------------


def update_state(
    layout: Layout,
    name: str,
    change: Callable[[AccountState], AccountState],
    *,
    hint_goal: str | None = None,
) -> AccountState:
    """Read-modify-write the account's state under its lock; written only when it changed.

    A write leaves a change hint (naming ``hint_goal``) so idle agents look
    at the account's goals again at once.
    """
    path = state_file(layout, name)
    ensure_dir(path.parent)
    with locked(path):
        before = read_state(layout, name)
        after = change(before)
        if after != before:
            atomic_write_model(path, after)
    if after != before and hint_goal is not None:
        note_goal_changed(layout, hint_goal)
    return after


def admit_turn(
    layout: Layout,
    name: str,
    goal_id: str,
    *,
    now: datetime,
    turn_timeout_s: float,
    priority: int | None = None,
) -> Admission:
    """:func:`rules.admit` on the root's and the account's states, budgets checked first.

    Most turns read the states and write nothing; taking the probe or a
    staggered start re-decides under the lock, so two agents never both take it.
    An account with a damaged file refuses (``damaged``): its goals wait for a repair.
    ``priority`` is the goal's (the account's ``--admit-past-priority`` may let it past).
    """
    root = rules.admit(_checked_state(layout, ROOT_BUDGET, now=now), goal_id, now=now)
    if not root.allowed:
        return root
    try:
        policy = admission_policy(layout, name)
    except AccountDamagedError as e:
        return rules.admit(damaged_state(e), goal_id, now=now)
    state = _checked_state(layout, name, now=now)
    admission = rules.admit(state, goal_id, now=now, policy=policy, priority=priority)
    if not (admission.take_probe or admission.take_stagger):
        return admission
    decided: list[Admission] = []

    def take(state: AccountState) -> AccountState:
        decided.append(rules.admit(state, goal_id, now=now, policy=policy, priority=priority))
        return rules.taken(state, decided[-1], goal_id, now=now, turn_timeout_s=turn_timeout_s)

    update_state(layout, name, take)
    return decided[-1]


def _checked_state(layout: Layout, name: str, *, now: datetime) -> AccountState:
    """:func:`check_budget`'s state, or the account held as damaged when a file of it is."""
    try:
        return check_budget(layout, name, now=now)
    except AccountDamagedError as e:
        return damaged_state(e)


def apply_signal(layout: Layout, turn: TurnSignal) -> AccountState:
    """Apply one turn's evidence to its account (idempotent by turn key).

    A budgeted account's (and a budgeted root's) spend gets the turn's tokens
    and cost, estimated from the account's prices when the host reported none.
    Fault points ``account:before_update`` and ``account:after_update`` bracket it.
    """
    fault_point("account:before_update")
    record_spend(layout, turn)
    before: list[AccountState] = []

    def observe(state: AccountState) -> AccountState:
        before.append(state)
        return observation.observe(state, turn)

    state = update_state(layout, turn.account, observe, hint_goal=turn.goal_id)
    if before and _parking(before[-1]) != _parking(state):
        _log_parking(state, turn)
    fault_point("account:after_update")
    return state


def _parking(state: AccountState) -> tuple[object, ...]:
    return state.condition, state.until, state.gate


def _log_parking(state: AccountState, turn: TurnSignal) -> None:
    """One line when a turn parks, re-parks or reopens its account, naming the goal and turn."""
    turn_key, _, attempt = turn.turn_key.rpartition("#")  # the fence key: turn key#attempt
    human = state.condition in (Condition.NEEDS_HUMAN, Condition.LOGIN_REFUSED)
    (log.warning if human else log.info)(
        "account_parked" if state.condition is not Condition.OK else "account_reopened",
        account=state.name,
        condition=state.condition.value,
        until=state.until.isoformat() if state.until is not None else None,
        goal_id=turn.goal_id,
        turn_key=turn_key or turn.turn_key,
        attempt=int(attempt) if attempt.isdigit() else None,
        signal=turn.signal.value,
    )


def resolve_gate(layout: Layout, name: str, *, now: datetime) -> AccountState:
    """A human answered the account's gate: its goals may go on (the next turn is a probe)."""
    return update_state(layout, name, lambda s: observation.resolved(s, now=now))


def reopen_login(layout: Layout, name: str, *, now: datetime) -> AccountState:
    """A check through the CLI got through: an account parked for its login goes on (a probe).

    Any other state is left as it is.
    """
    return update_state(
        layout, name, lambda s: observation.resolved(s, now=now) if s.login_refused else s
    )


def park_login(layout: Layout, name: str, message: str, *, now: datetime) -> AccountState:
    """A check through the CLI was refused: the account is parked for its login (one gate)."""
    return update_state(
        layout, name, lambda s: observation.refuse_login(s, message, at=now, by="check")
    )


def refused_by_account(decision: QuotaDecision, admission: Admission) -> QuotaDecision:
    """The goal's quota decision turned into the account's refusal (``account_waiting``)."""
    return decision.model_copy(
        update={
            "allowed": False,
            "reason": QuotaReason.ACCOUNT_WAITING,
            "message": admission.message,
            "next_eligible_at": admission.until,
        }
    )


# --- budgets ------------------------------------------------------------------------------------


def write_root_budget(layout: Layout, budget: RootBudget) -> None:
    """Set the root's budget."""
    path = root_budget_file(layout)
    ensure_dir(path.parent)
    atomic_write_model(path, budget)


def record_spend(layout: Layout, turn: TurnSignal) -> None:
    """Add the turn's spend to its account's and the root's buckets, where they are budgeted."""
    tokens = turn.input_tokens + turn.output_tokens
    if tokens == 0 and turn.cost_usd == 0:
        return
    account = read_account(layout, turn.account)
    estimated = 0.0
    if turn.cost_usd == 0 and account is not None:
        estimated = estimated_cost(
            turn.input_tokens,
            turn.output_tokens,
            account.price_in_per_mtok,
            account.price_out_per_mtok,
        )
    for name in (turn.account, ROOT_BUDGET):
        budget = budget_of(layout, name)
        if budget is None:
            continue
        path = spend_file(layout, name)
        ensure_dir(path.parent)
        with locked(path):
            before = read_spend(layout, name)
            after = added(
                before,
                turn.turn_key,
                at=turn.at,
                tokens=tokens,
                cost_usd=turn.cost_usd + estimated,
                estimated_usd=estimated,
                keep_hours=budget.window_hours,
            )
            if after != before:
                atomic_write_model(path, after, indent=None)


def _budget_gate(
    state: AccountState, found: Breach | None, who: str, now: datetime
) -> AccountState:
    """The state with its budget gate opened (a breach) or closed (the window refilled). Pure."""
    budget_gate = state.gate is not None and state.gate.opened_by == BUDGET_GATE
    if found is not None and state.gate is None:
        gate = AccountGate(question=found.question(who), opened_at=now, opened_by=BUDGET_GATE)
        return state.model_copy(
            update={
                "gate": gate,
                "condition": Condition.BUDGET_SPENT,
                "until": found.refills_at,
                "updated_at": now,
            }
        )
    if found is None and budget_gate:
        return state.model_copy(
            update={"gate": None, "condition": Condition.OK, "until": None, "updated_at": now}
        )
    return state


def check_budget(layout: Layout, name: str, *, now: datetime) -> AccountState:
    """Open the account's (or root's) budget gate on a breach, close it once the window refilled.

    Returns the state after (read only, no lock, when nothing changes).
    """
    budget = budget_of(layout, name)
    state = read_state(layout, name)
    if budget is None and (state.gate is None or state.gate.opened_by != BUDGET_GATE):
        return state
    found = breach(budget, read_spend(layout, name), now) if budget is not None else None
    who = "the root" if name == ROOT_BUDGET else f"account {name}"
    if _budget_gate(state, found, who, now) == state:
        return state
    return update_state(layout, name, lambda s: _budget_gate(s, found, who, now))
