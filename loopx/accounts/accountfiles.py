"""The account files under the root: their paths and every read (no locks, no writes).

``accounts/<name>/account.json`` (policy), ``state.json`` (what the turns
taught), ``spend.json`` (a budgeted account's recent spend) and the root's
``accounts/.root/``. Status reads these at every answer, so this module
imports no lock or decision machinery; :mod:`loopx.accounts.accountstore` writes.

A file that cannot be read raises :class:`~loopx.errors.AccountDamagedError`,
naming the account: one bad file costs its account, never the root. The
readers serving the whole root (status, `account list`, the scheduler) hold
that account in :func:`damaged_state` and go on with the others.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Final, Literal, NamedTuple, TypeVar

from pydantic import BaseModel, Field

from loopx.accounts.headerwindows import header_windows
from loopx.accounts.records import (
    DEFAULT_PREFIX,
    Account,
    AccountBudget,
    AccountState,
    Condition,
    RootBudget,
    account_of,
    is_default,
    valid_account_name,
)
from loopx.accounts.rollingbudget import ROOT_BUDGET, AccountSpend
from loopx.accounts.windows import AdmissionPolicy, merged
from loopx.errors import (
    AccountDamagedError,
    AccountMismatchError,
    AccountNotFoundError,
    CorruptFileError,
    FileTooLargeError,
    UnsafePathError,
    UsageError,
)
from loopx.model import Record, UtcDatetime, utcnow
from loopx.registry.goalrecords import Goal
from loopx.root import Layout
from loopx.storage.files import read_model_or_none

ACCOUNTS_NAME: Final = "accounts"
# The files admission reads, whose change the scheduler looks at an account's goals again for.
_WATCHED: Final = ("account.json", "state.json", "budget.json", "provider-headers.json")

M = TypeVar("M", bound=BaseModel)


def accounts_dir(layout: Layout) -> Path:
    """``accounts/``."""
    return layout.root / ACCOUNTS_NAME


def _checked(name: str) -> str:
    if name != ROOT_BUDGET and not valid_account_name(name):
        msg = f"invalid account name {name!r}"
        raise UsageError(msg, hint="letters, digits, '.', '_' or '-', at most 64")
    return name


def account_file(layout: Layout, name: str) -> Path:
    """``accounts/<name>/account.json``."""
    return accounts_dir(layout) / _checked(name) / "account.json"


def state_file(layout: Layout, name: str) -> Path:
    """``accounts/<name>/state.json``."""
    return accounts_dir(layout) / _checked(name) / "state.json"


def spend_file(layout: Layout, name: str) -> Path:
    """``accounts/<name>/spend.json``: a budgeted account's recent spend (``.root``: the root's)."""
    return accounts_dir(layout) / _checked(name) / "spend.json"


def root_budget_file(layout: Layout) -> Path:
    """``accounts/.root/budget.json``: the whole root's budget."""
    return accounts_dir(layout) / ROOT_BUDGET / "budget.json"


def _read(name: str, path: Path, model: type[M]) -> M | None:
    """One file of account ``name``; None when it does not exist.

    Raises:
        AccountDamagedError: it is not its kind's JSON, or not a file LoopX could have written.
    """
    try:
        return read_model_or_none(path, model)
    except (CorruptFileError, UnsafePathError) as e:
        raise AccountDamagedError(name, path, e.problem) from e
    except FileTooLargeError as e:
        raise AccountDamagedError(
            name, path, f"it holds {e.size} bytes, more than LoopX writes"
        ) from e
    except (PermissionError, IsADirectoryError) as e:
        raise AccountDamagedError(name, path, f"cannot be read: {e.strerror}") from e


def read_account(layout: Layout, name: str) -> Account | None:
    """The account's policy, or None when it has no file (a default account, or none).

    Raises:
        AccountDamagedError: its file is damaged.
    """
    if is_default(name):
        return None
    return _read(name, account_file(layout, name), Account)


def load_account(layout: Layout, name: str) -> Account:
    """The account's policy.

    Raises:
        AccountNotFoundError: no such account.
        AccountDamagedError: its file is damaged.
    """
    account = read_account(layout, name)
    if account is None:
        raise AccountNotFoundError(name, layout.root)
    return account


def account_exists(layout: Layout, name: str) -> bool:
    """Whether ``name`` is an account of this root (a named one with a file)."""
    return valid_account_name(name) and account_file(layout, name).is_file()


def account_names(layout: Layout) -> list[str]:
    """Every account with a directory under ``accounts/`` (named and default ones), by name.

    Lists names only, reading no file, so a damaged one is listed like the others.
    """
    folder = accounts_dir(layout)
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except (FileNotFoundError, NotADirectoryError):
        return []
    return [
        e.name for e in entries if valid_account_name(e.name) and e.is_dir(follow_symlinks=False)
    ]


def check_goal_account(layout: Layout, goal: Goal) -> None:
    """Refuse a goal naming an account that does not exist or serves another host kind.

    Its fallback accounts (hand-off) may be of any host kind, but must exist
    (a host kind's default account always does).

    Raises:
        AccountNotFoundError: no such account, or no such fallback account.
        AccountMismatchError: the account's host kind is not the goal's.
    """
    for name in goal.fallback_accounts:
        if not is_default(name):
            load_account(layout, name)
    if goal.account is None:
        return
    account = load_account(layout, goal.account)
    if account.host_kind != goal.host.kind:
        raise AccountMismatchError(goal.id, account.name, account.host_kind, goal.host.kind)


def account_host_kind(layout: Layout, name: str) -> str:
    """The host kind of account ``name``: a default account's from its name, else its file's.

    Raises:
        AccountNotFoundError: a named account without a file.
        AccountDamagedError: its file is damaged.
    """
    if is_default(name):
        return name.removeprefix(DEFAULT_PREFIX)
    return load_account(layout, name).host_kind


def goals_of_account(name: str, goals: Iterable[Goal]) -> list[str]:
    """The ids of the goals among ``goals`` whose turns run on account ``name``."""
    return sorted(g.id for g in goals if account_of(g.account, g.host.kind) == name)


def fresh_state(name: str) -> AccountState:
    """The state of an account no turn taught anything yet.

    A named account's first turn is a probe (its credentials and limit are not
    known yet); a default account (and the root's budget) starts as proven, as
    LoopX ran before accounts.
    """
    return AccountState(name=name, proven=is_default(name) or name == ROOT_BUDGET)


def read_state(layout: Layout, name: str) -> AccountState:
    """The account's state (a fresh one when it has none yet).

    Raises:
        AccountDamagedError: the state file is damaged.
    """
    return _read(name, state_file(layout, name), AccountState) or fresh_state(name)


def damaged_state(error: AccountDamagedError) -> AccountState:
    """The state an account with a damaged file is held in: its goals wait for a repair.

    Never written: the damaged file stays as it is for a human (or a backup) to replace.
    """
    reason = f"{error.path} is damaged: {error.problem}"
    return AccountState(name=error.name, condition=Condition.DAMAGED, reason=reason)


def held_state(layout: Layout, name: str) -> AccountState:
    """The account's state as admission reads it, or :func:`damaged_state` when it cannot.

    Reads what :func:`loopx.accounts.accountstore.check_budget` reads (the state, the
    policy's budget and, when one is capped, the spend), and writes nothing.
    """
    try:
        state = read_state(layout, name)
        if budget_of(layout, name) is not None:
            read_spend(layout, name)
    except AccountDamagedError as e:
        return damaged_state(e)
    return state


class HeldAccount(NamedTuple):
    """An account as admission reads it: its state and its admission policy."""

    state: AccountState
    policy: AdmissionPolicy


def admission_policy(layout: Layout, name: str) -> AdmissionPolicy:
    """The account's admission policy (a default account's, or the root's: the default).

    Raises:
        AccountDamagedError: its policy file is damaged.
    """
    account = read_account(layout, name) if name != ROOT_BUDGET else None
    return account.admission if account is not None else AdmissionPolicy()


class SeenHeader(Record):
    """One header's latest value."""

    value: str
    seen_at: UtcDatetime


class ProviderHeaders(Record):
    """The latest rate-limit and usage headers of the account's provider, by lower-case name."""

    schema_version: Literal[1] = 1
    account: str
    headers: dict[str, SeenHeader] = Field(default_factory=dict)

    def pairs(self) -> dict[str, tuple[str, datetime]]:
        """Each header's value and when it was seen."""
        return {name: (h.value, h.seen_at) for name, h in self.headers.items()}


def headers_file(layout: Layout, account: str) -> Path:
    """``accounts/<name>/provider-headers.json``."""
    return accounts_dir(layout) / account / "provider-headers.json"


def read_headers(layout: Layout, account: str) -> ProviderHeaders | None:
    """What was recorded for ``account`` (None: nothing yet, or a file LoopX did not write).

    A damaged file is no word from the provider: the windows the turns reported still hold.
    """
    try:
        return read_model_or_none(headers_file(layout, account), ProviderHeaders)
    except (CorruptFileError, UnsafePathError):
        return None


def held_account(layout: Layout, name: str) -> HeldAccount:
    """:func:`held_state` with the account's admission policy; a damaged policy holds it too.

    The windows are the turns' reports merged with what a sandboxed turn's proxy
    saw in the provider's headers, newest first (:func:`read_headers`).
    """
    state = held_state(layout, name)
    try:
        policy = admission_policy(layout, name)
    except AccountDamagedError as e:
        return HeldAccount(damaged_state(e), AdmissionPolicy())
    seen = read_headers(layout, name) if state.condition is not Condition.DAMAGED else None
    if seen is not None and (reported := header_windows(seen.pairs())):
        windows = merged(state.windows, reported, at=utcnow())
        state = state.model_copy(update={"windows": windows})
    return HeldAccount(state, policy)


def account_fingerprints(layout: Layout) -> dict[str, tuple[int, ...]]:
    """``(inode, mtime_ns, size)`` of every account's policy, state and root budget file.

    One ``stat`` per file; an account whose files all are missing is left out.
    """
    folder = accounts_dir(layout)
    out: dict[str, tuple[int, ...]] = {}
    with contextlib.suppress(FileNotFoundError, NotADirectoryError):
        for entry in folder.iterdir():
            prints: tuple[int, ...] = ()
            for n, part in enumerate(_WATCHED):
                with contextlib.suppress(FileNotFoundError, NotADirectoryError):
                    st = (entry / part).stat()
                    prints += (n, st.st_ino, st.st_mtime_ns, st.st_size)
            if prints:
                out[entry.name] = prints
    return out


def read_root_budget(layout: Layout) -> RootBudget | None:
    """The root's budget, or None when none was set.

    Raises:
        AccountDamagedError: its file is damaged.
    """
    return _read(ROOT_BUDGET, root_budget_file(layout), RootBudget)


def budget_of(layout: Layout, name: str) -> AccountBudget | None:
    """The capped budget of an account (or of the root, ``.root``); None when nothing is capped.

    Raises:
        AccountDamagedError: the account's (or the root's budget) file is damaged.
    """
    if name == ROOT_BUDGET:
        root = read_root_budget(layout)
        budget = root.budget if root is not None else None
    else:
        account = read_account(layout, name)
        budget = account.budget if account is not None else None
    return budget if budget is not None and budget.capped else None


def read_spend(layout: Layout, name: str) -> AccountSpend:
    """The account's (or root's) recorded spend.

    Raises:
        AccountDamagedError: the spend file is damaged.
    """
    return _read(name, spend_file(layout, name), AccountSpend) or AccountSpend(name=name)
