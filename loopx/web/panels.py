"""The dashboard's accounts and worktree panels: rows built from what status and the goal hold.

Accounts come from the status document's ``accounts``, cut to a
bounded row each, so an account of 100,000 goals costs the overview the same as
one of ten. A goal's worktree is read for its goal page only: its
record, its last merge journal and what git says of its branch.
"""

from __future__ import annotations

import contextlib
from typing import Final

from pydantic import Field

from loopx.accounts.records import (
    AccountBudget,
    AccountSummary,
    Condition,
    WindowBar,
    WindowTotals,
)
from loopx.errors import LoopxError
from loopx.model import Record, UtcDatetime
from loopx.registry.goalrecords import Goal
from loopx.root import Layout
from loopx.worktree.mergejournal import MergeOutcome, MergeStep, read_merge_journal
from loopx.worktree.show import WorktreeView, worktree_view

WAITING_SHOWN: Final = 20  # goal ids an account row names; the count says how many in all


class AccountRow(Record):
    """One account on the overview: state, spend in its window, the goals it holds back."""

    name: str
    host_kind: str | None = None  # None: the root's own budget
    default: bool = False
    state: Condition
    until: UtcDatetime | None = None
    message: str = ""
    question: str | None = None  # the gate a human must answer (`loopx account resolve`)
    seen_by_goal: str | None = None
    probe_goal: str | None = None
    budget: AccountBudget | None = None
    spend: WindowTotals | None = None
    cost_estimated: bool = False
    goals: int = 0
    waiting: int = 0
    waiting_ids: list[str]  # the first WAITING_SHOWN of them
    windows: list[WindowBar] = Field(
        default_factory=list
    )  # the provider's usage windows against the admission mark


def account_row(summary: AccountSummary) -> AccountRow:
    """The summary as a bounded row. Pure."""
    return AccountRow(
        name=summary.name,
        host_kind=summary.host_kind,
        default=summary.default,
        state=summary.state,
        until=summary.until,
        message=summary.message,
        question=summary.question,
        seen_by_goal=summary.seen_by_goal,
        probe_goal=summary.probe_goal,
        budget=summary.budget,
        spend=summary.spend,
        cost_estimated=summary.cost_estimated,
        goals=len(summary.goals),
        waiting=len(summary.waiting),
        waiting_ids=summary.waiting[:WAITING_SHOWN],
        windows=summary.windows,
    )


class MergeState(Record):
    """The goal's last merge, from ``goals/<id>/merge.json``."""

    step: MergeStep
    outcome: MergeOutcome
    merged_commit: str | None = None
    conflicts: list[str]
    check_passed: bool | None = None
    gate_id: int | None = None
    updated_at: UtcDatetime


class WorktreePanel(Record):
    """A goal's worktree on its page: where, which branch, how far ahead, and its merge."""

    view: WorktreeView | None = None
    error: str | None = None  # why the worktree could not be read
    merge: MergeState | None = None


def worktree_panel(layout: Layout, goal: Goal | None) -> WorktreePanel | None:
    """The goal's worktree panel, or None for a goal without a worktree (or none known).

    Reads the worktree record and the merge journal and asks git for the
    branch's commits ahead and behind and for uncommitted changes; a damaged
    file or a failing git is reported in ``error``, never raised.
    """
    if goal is None or goal.worktree is None:
        return None
    panel = WorktreePanel()
    try:
        panel = panel.model_copy(update={"view": worktree_view(layout, goal)})
    except (LoopxError, OSError) as e:
        panel = panel.model_copy(update={"error": str(e)})
    with contextlib.suppress(LoopxError, OSError):
        journal = read_merge_journal(layout, goal.id)
        if journal is not None:
            merge = MergeState(
                step=journal.step,
                outcome=journal.outcome,
                merged_commit=journal.merged_commit,
                conflicts=journal.conflicts[:WAITING_SHOWN],
                check_passed=journal.check.passed if journal.check is not None else None,
                gate_id=journal.gate_id,
                updated_at=journal.updated_at,
            )
            panel = panel.model_copy(update={"merge": merge})
    return panel
