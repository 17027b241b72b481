"""What `loopx account ...` prints with ``--json``, and each account's part of `loopx status`."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from datetime import datetime
from enum import StrEnum
from typing import Literal, NamedTuple

from loopx.accounts.accountfiles import (
    account_file,
    account_names,
    admission_policy,
    budget_of,
    damaged_state,
    read_account,
    read_spend,
    read_state,
    root_budget_file,
    state_file,
)
from loopx.accounts.clihome import config_dir_of
from loopx.accounts.records import (
    Account,
    AccountBudget,
    AccountState,
    AccountSummary,
    Condition,
    WindowBar,
    WindowTotals,
    account_of,
    default_account,
    is_default,
)
from loopx.accounts.rollingbudget import ROOT_BUDGET, totals
from loopx.accounts.rules import admit, mark_admission
from loopx.accounts.windows import AdmissionPolicy, UsageWindow, label, live, past_mark
from loopx.errors import AccountDamagedError
from loopx.model import Record
from loopx.registry.goalrecords import Goal, GoalStatus
from loopx.root import Layout
from loopx.secrets import redact_env


class AccountDocument(Record):
    """`account add|edit --json`: the account's policy as written (``env`` values redacted)."""

    schema_version: Literal[1] = 1
    account: Account


class AccountList(Record):
    """`account list --json`: every named account, and the default accounts goals use."""

    schema_version: Literal[1] = 1
    accounts: list[AccountSummary]


class CheckOutcome(StrEnum):
    """What `loopx account check` found: the call got through, or why not."""

    OK = "ok"
    AUTH = "auth"  # the login was refused (expired, revoked, rejected): the account is parked
    RATE_LIMIT = "rate_limit"
    UNREACHABLE = "unreachable"
    SERVER_ERROR = "server_error"
    MISSING = "missing"  # the CLI is not installed
    ERROR = "error"  # anything else (the CLI's own words in ``message``)


class AccountCheck(Record):
    """`account check --json`: one minimal authenticated call through the account's CLI."""

    schema_version: Literal[1] = 1
    name: str
    host_kind: str
    outcome: CheckOutcome
    message: str  # one line: the CLI's own words when the call did not get through
    exit_code: int | None = None  # the CLI's (None: it did not run, or did not end in time)
    config_dir: str | None = None
    state: Condition | None = None  # the account's state after the check


class AccountShow(Record):
    """`account show --json`: the policy (None for a default account) and the summary."""

    schema_version: Literal[1] = 1
    account: Account | None
    summary: AccountSummary


def redacted(account: Account) -> Account:
    """The account with its ``--env`` values that look secret replaced (for printing)."""
    return account.model_copy(update={"env": redact_env(account.env)})


def summarise(
    layout: Layout,
    name: str,
    goals: Iterable[Goal],
    *,
    now: datetime,
    account: Account | None = None,
    state: AccountState | None = None,
) -> AccountSummary:
    """One account's summary from its files and the goals that use it.

    An account with a damaged file is summarised as ``damaged`` (naming the
    file), holding back its active goals; nothing is raised.
    """
    mine = [g for g in goals if name == ROOT_BUDGET or account_of(g.account, g.host.kind) == name]
    active = [g for g in mine if g.status is GoalStatus.ACTIVE]
    state, account, policy, budget, spend, damaged = _read(
        layout, name, now=now, account=account, state=state
    )
    home = config_dir_of(layout, account) if account is not None else None
    # "" is no goal, of no priority: what every goal but the probe (and those let past) is told.
    probe = admit(state, "", now=now, policy=policy)
    holding = not probe.allowed
    # Held back by a window past its mark: goals above --admit-past-priority still start.
    marked = holding and probe == mark_admission(name, state, policy, now)
    return AccountSummary(
        name=name,
        host_kind=_host_kind(name, account),
        default=is_default(name),
        state=state.condition,
        until=state.until,
        message=probe.message if holding else "",
        question=state.gate.question if state.gate is not None else None,
        seen_by_goal=state.seen_by_goal,
        seen_by_turn=state.seen_by_turn,
        probe_goal=state.probe_goal,
        budget=budget,
        spend=spend,
        cost_estimated=bool(spend and spend.estimated_usd > 0),
        goals=sorted(g.id for g in mine),
        waiting=sorted(
            g.id
            for g in active
            if holding
            and g.id != state.probe_goal
            and not (marked and policy.lets_past(g.priority))
        ),
        damaged_file=damaged,
        windows=window_bars(state.windows, policy, now=now),
        lets_past_priority=policy.past_priority if marked else None,
        config_dir=str(home) if home is not None else None,
    )


class _Files(NamedTuple):
    """What a summary reads of an account's files."""

    state: AccountState
    account: Account | None
    policy: AdmissionPolicy
    budget: AccountBudget | None
    spend: WindowTotals | None
    damaged: str | None  # the damaged file's path


def _read(
    layout: Layout,
    name: str,
    *,
    now: datetime,
    account: Account | None,
    state: AccountState | None,
) -> _Files:
    """The account's state, account, policy, budget and window spend (those given not read).

    A damaged file gives the ``damaged`` state and its path, with what was read before it.
    """
    policy = AdmissionPolicy()
    try:
        state = state or read_state(layout, name)
        account = account if account is not None else read_account(layout, name)
        policy = account.admission if account is not None else admission_policy(layout, name)
        budget = budget_of(layout, name)
        spend = totals(read_spend(layout, name), budget.window_hours, now) if budget else None
    except AccountDamagedError as e:
        return _Files(damaged_state(e), account, policy, None, None, str(e.path))
    return _Files(state, account, policy, budget, spend, None)


def _host_kind(name: str, account: Account | None) -> str | None:
    """The account's host kind: its own, or the one a default account is named for."""
    kind = account.host_kind if account is not None else None
    if kind is None and is_default(name):
        kind = name.removeprefix("default-")
    return kind


def window_bars(
    windows: Sequence[UsageWindow], policy: AdmissionPolicy, *, now: datetime
) -> list[WindowBar]:
    """The account's windows whose report still holds, as bars against their marks. Pure."""
    over = {w.name for w in past_mark(windows, policy, now=now)}
    return [
        WindowBar(
            name=w.name,
            label=label(w),
            used_percent=w.used_percent,
            mark=policy.mark(w.name),
            resets_at=w.resets_at,
            seen_at=w.seen_at,
            past_mark=w.name in over,
        )
        for w in windows
        if live(w, now)
    ]


def _shown(layout: Layout, used: Iterable[str] = ()) -> list[str]:
    """The accounts status shows, by name (the root's budget apart).

    Named ones (with a policy file, damaged or not), and default ones that
    goals use or that have a state file.
    """
    shown = set()
    for name in account_names(layout):
        part = state_file(layout, name) if is_default(name) else account_file(layout, name)
        if os.path.lexists(part):
            shown.add(name)
    return sorted(shown | {n for n in used if is_default(n)})


def summaries(layout: Layout, goals: list[Goal], *, now: datetime) -> list[AccountSummary]:
    """Every account status shows: named ones, used or known default ones, the root's budget."""
    used = {account_of(g.account, g.host.kind) for g in goals}
    out = [summarise(layout, n, goals, now=now) for n in _shown(layout, used)]
    if os.path.lexists(root_budget_file(layout)):  # a damaged one too: it holds every goal
        out.append(summarise(layout, ROOT_BUDGET, goals, now=now))
    return out


__all__ = [
    "AccountCheck",
    "AccountDocument",
    "AccountList",
    "AccountShow",
    "AccountSummary",
    "CheckOutcome",
    "default_account",
    "redacted",
    "summaries",
    "summarise",
]


def account_summaries(layout: Layout, *, now: datetime) -> list[AccountSummary]:
    """Every account status shows, without goals (the status overlay fills those in).

    Named accounts, default accounts with a state file, and the root's budget
    when one is set: a few small files, read at every status answer.
    """
    out = [summarise(layout, n, (), now=now) for n in _shown(layout)]
    if os.path.lexists(root_budget_file(layout)):  # a damaged one too: it holds every goal
        out.append(summarise(layout, ROOT_BUDGET, (), now=now))
    return out
