"""``accounts/<name>/handoffs.json`` and ``resumes.json``: automatic work an account took.

An account with ``max_handoffs`` takes at most that many turns handed off
from other accounts in its budget window (``budget.window_hours``), and one
with ``max_resumes`` at most that many automatic resumes of a stalled host
(the stall ladder's runs). The step takes a slot under the file's lock before
the work starts (:func:`take_slot`); work cut short keeps its slot, so the
count errs toward less automatic work, never more.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Final, Literal

from pydantic import Field

from loopx.accounts.accountfiles import accounts_dir, load_account, read_account
from loopx.accounts.records import Account, is_default
from loopx.model import Record, UtcDatetime
from loopx.root import Layout
from loopx.storage.dirs import ensure_dir
from loopx.storage.files import atomic_write_model, read_model_or_none
from loopx.storage.locks import locked

FILE_NAME: Final = "handoffs.json"
Kind = Literal["handoffs", "resumes"]  # what the slots count, and the file's name


class AccountHandoffs(Record):
    """The hand-offs (or resumes) an account took in its window: when each began, by goal."""

    schema_version: Literal[1] = 1
    name: str
    taken: list[tuple[str, UtcDatetime]] = Field(default_factory=list)  # (goal id, decided at)


def handoffs_file(layout: Layout, name: str, kind: Kind = "handoffs") -> Path:
    """``accounts/<name>/handoffs.json`` (or ``resumes.json``)."""
    return accounts_dir(layout) / name / f"{kind}.json"


def _cap(account: Account, kind: Kind) -> int | None:
    return account.max_handoffs if kind == "handoffs" else account.max_resumes


def _window(account: Account) -> timedelta:
    return timedelta(hours=account.budget.window_hours)


def in_window(record: AccountHandoffs, account: Account, *, now: datetime) -> int:
    """How many hand-offs the account took in its window ending ``now``. Pure."""
    start = now - _window(account)
    return sum(1 for _, at in record.taken if start < at <= now)


def at_cap(layout: Layout, name: str, *, now: datetime, kind: Kind = "handoffs") -> bool:
    """Whether the account took its cap of ``kind`` in its window (a default one has no cap).

    Raises:
        LoopxError: its policy or this file is damaged.
    """
    account = None if is_default(name) else read_account(layout, name)
    cap = _cap(account, kind) if account is not None else None
    if account is None or cap is None:
        return False
    record = read_model_or_none(handoffs_file(layout, name, kind), AccountHandoffs)
    taken = in_window(record, account, now=now) if record is not None else 0
    return taken >= cap


def take_slot(
    layout: Layout, name: str, goal_id: str, *, now: datetime, kind: Kind = "handoffs"
) -> bool:
    """Record one of ``kind`` on the account under the file's lock; False at its cap.

    Raises:
        AccountNotFoundError: a named account without a file.
        LoopxError: its policy or this file is damaged.
    """
    if is_default(name):
        return True
    account = load_account(layout, name)
    cap = _cap(account, kind)
    if cap is None:
        return True
    path = handoffs_file(layout, name, kind)
    ensure_dir(path.parent)
    with locked(path):
        record = read_model_or_none(path, AccountHandoffs) or AccountHandoffs(name=name)
        if in_window(record, account, now=now) >= cap:
            return False
        start = now - _window(account)
        kept = [(g, at) for g, at in record.taken if at > start]
        atomic_write_model(path, record.model_copy(update={"taken": [*kept, (goal_id, now)]}))
    return True
