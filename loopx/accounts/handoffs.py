"""``accounts/<name>/handoffs.json``: the handed-off turns an account took, for its cap.

An account with ``max_handoffs`` takes at most that many turns handed off
from other accounts in its budget window (``budget.window_hours``). The
hand-off step takes a slot under the file's lock before the turn is
planned (:func:`take_slot`); a turn cut short before it ran keeps its slot,
so the count errs toward fewer hand-offs, never more.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Final, Literal

from pydantic import Field

from loopx.accounts.files import accounts_dir, load_account, read_account
from loopx.accounts.model import Account, is_default
from loopx.model import Record, UtcDatetime
from loopx.root import Layout
from loopx.storage.files import atomic_write_model, ensure_dir, read_model_or_none
from loopx.storage.locks import locked

FILE_NAME: Final = "handoffs.json"


class AccountHandoffs(Record):
    """The hand-offs an account took in its window: when each was decided, by goal."""

    schema_version: Literal[1] = 1
    name: str
    taken: list[tuple[str, UtcDatetime]] = Field(default_factory=list)  # (goal id, decided at)


def handoffs_file(layout: Layout, name: str) -> Path:
    """``accounts/<name>/handoffs.json``."""
    return accounts_dir(layout) / name / FILE_NAME


def _window(account: Account) -> timedelta:
    return timedelta(hours=account.budget.window_hours)


def in_window(record: AccountHandoffs, account: Account, *, now: datetime) -> int:
    """How many hand-offs the account took in its window ending ``now``. Pure."""
    start = now - _window(account)
    return sum(1 for _, at in record.taken if start < at <= now)


def at_cap(layout: Layout, name: str, *, now: datetime) -> bool:
    """Whether the account took its ``max_handoffs`` in its window (a default one has no cap).

    Raises:
        LoopxError: its policy or this file is damaged.
    """
    account = None if is_default(name) else read_account(layout, name)
    if account is None or account.max_handoffs is None:
        return False
    record = read_model_or_none(handoffs_file(layout, name), AccountHandoffs)
    taken = in_window(record, account, now=now) if record is not None else 0
    return taken >= account.max_handoffs


def take_slot(layout: Layout, name: str, goal_id: str, *, now: datetime) -> bool:
    """Record a hand-off to the account under the file's lock; False when its cap is reached.

    Raises:
        AccountNotFoundError: a named account without a file.
        LoopxError: its policy or this file is damaged.
    """
    if is_default(name):
        return True
    account = load_account(layout, name)
    if account.max_handoffs is None:
        return True
    path = handoffs_file(layout, name)
    ensure_dir(path.parent)
    with locked(path):
        record = read_model_or_none(path, AccountHandoffs) or AccountHandoffs(name=name)
        if in_window(record, account, now=now) >= account.max_handoffs:
            return False
        start = now - _window(account)
        kept = [(g, at) for g, at in record.taken if at > start]
        atomic_write_model(path, record.model_copy(update={"taken": [*kept, (goal_id, now)]}))
    return True
