"""The account files: every account's policy, state and spend, and the root's budget, parse.

A damaged one holds its account's goals (they wait, as status shows); the
rest of the root goes on, so each finding names the one account it costs
and the repair that frees it.
"""

from __future__ import annotations

import contextlib
import os
from typing import Final

from loopx.accounts.accountfiles import (
    account_file,
    accounts_dir,
    root_budget_file,
    spend_file,
    state_file,
)
from loopx.accounts.records import Account, AccountState, RootBudget, account_of, is_default
from loopx.accounts.rollingbudget import ROOT_BUDGET, AccountSpend
from loopx.doctor.findings import Checker, FindingCode, Severity, q
from loopx.errors import LoopxError
from loopx.ids import is_valid_goal_id
from loopx.registry.goalrecords import Goal
from loopx.storage.files import read_model

_SHOWN: Final = 5  # goal ids named in a finding; the rest are counted


def check_accounts(doc: Checker) -> None:
    """Every file of every account directory under ``accounts/``, and the root's budget."""
    folder = accounts_dir(doc.layout)
    try:
        names = sorted(e.name for e in os.scandir(folder) if e.is_dir(follow_symlinks=False))
    except (FileNotFoundError, NotADirectoryError):
        return
    goals = _goals(doc)
    for name in names:
        if name != ROOT_BUDGET and not is_valid_goal_id(name):
            continue  # not an account LoopX made; the walk reports what it must
        try:
            _check_account(doc, name, goals)
        except (LoopxError, OSError) as e:
            doc.add(
                Severity.ERROR,
                FindingCode.ACCOUNT_DAMAGED,
                folder / name,
                f"could not be checked: {e}",
                f"restore {q(folder / name)} from a backup",
            )


def _goals(doc: Checker) -> list[Goal]:
    """Every goal whose goal file reads (the others are reported with their goal), read-only."""
    layout = doc.layout
    try:
        ids = sorted(os.listdir(layout.goals_dir))
    except (FileNotFoundError, NotADirectoryError):
        return []
    goals = []
    for goal_id in ids:
        if not is_valid_goal_id(goal_id):
            continue
        with contextlib.suppress(FileNotFoundError, LoopxError, OSError):
            goals.append(read_model(layout.goal_file(goal_id), Goal))
    return goals


def _check_account(doc: Checker, name: str, goals: list[Goal]) -> None:
    layout = doc.layout
    mine = sorted(
        g.id for g in goals if name == ROOT_BUDGET or account_of(g.account, g.host.kind) == name
    )
    who = "the root's budget" if name == ROOT_BUDGET else f"account {name}"
    held = f"; {who} holds {_goal_count(mine)} back until it is repaired"
    if name == ROOT_BUDGET:
        path = root_budget_file(layout)
        doc.model(
            path,
            RootBudget,
            f"rm {q(path)}  (the root has no budget until `loopx account budget` sets one "
            "again; restore it from a backup instead to keep it)",
            code=FindingCode.ACCOUNT_DAMAGED,
            why=held,
        )
    elif not is_default(name):
        path = account_file(layout, name)
        kinds = sorted({g.host.kind for g in goals if g.account == name})
        kind = kinds[0] if len(kinds) == 1 else "KIND"
        doc.model(
            path,
            Account,
            f"rm {q(path)} && loopx account add {name} --host-kind {kind}  (restore it from a "
            "backup instead to keep its env file, budget and limits)",
            code=FindingCode.ACCOUNT_DAMAGED,
            why=held,
        )
    state = state_file(layout, name)
    doc.model(
        state,
        AccountState,
        f"rm {q(state)}  (what its turns taught is forgotten: its next turn goes first as a probe)",
        code=FindingCode.ACCOUNT_DAMAGED,
        why=held,
    )
    spend = spend_file(layout, name)
    doc.model(
        spend,
        AccountSpend,
        f"rm {q(spend)}  (its budget's window starts empty; restore it from a backup to keep "
        "what was spent)",
        code=FindingCode.ACCOUNT_DAMAGED,
        why=held,
    )


def _goal_count(goal_ids: list[str]) -> str:
    if not goal_ids:
        return "no goal"
    more = len(goal_ids) - _SHOWN
    shown = ", ".join(goal_ids[:_SHOWN]) + (f" and {more} more" if more > 0 else "")
    return f"{len(goal_ids)} goal(s) ({shown})"


__all__ = ["check_accounts"]
