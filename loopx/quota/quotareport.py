"""``loopx quota show``: a goal's policy, window, spend, what is left, and the decision.

The decision is :func:`loopx.quota.decision.should_run`'s, on the inputs
:func:`loopx.quota.decision.gather_inputs` reads.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from loopx.model import Record, UtcDatetime
from loopx.quota.budget import QuotaRemaining, remaining_of
from loopx.quota.decision import QuotaDecision, gather_inputs, should_run
from loopx.quota.window import SpendTotals
from loopx.registry.goalrecords import Goal
from loopx.registry.quota_policy import QuotaPolicy
from loopx.root import Layout


class QuotaReport(Record):
    """The `loopx quota show --json` document: policy, window, spend, remaining, decision."""

    schema_version: Literal[1] = 1
    goal_id: str
    policy: QuotaPolicy
    window_start: UtcDatetime
    window_end: UtcDatetime
    spend: SpendTotals  # inside the window
    lifetime: SpendTotals  # everything the ledger holds
    remaining: QuotaRemaining
    decision: QuotaDecision


def quota_report(layout: Layout, goal: Goal, *, now: datetime, leased: bool = False) -> QuotaReport:
    """Everything `loopx quota show` prints: policy, window, spend, remaining and the decision.

    Raises:
        CorruptFileError: the goal's state or a ledger line is damaged.
    """
    state, spend, room = gather_inputs(layout, goal, now=now)
    decision = should_run(goal, state, spend, room, leased=leased, now=now)
    return QuotaReport(
        goal_id=goal.id,
        policy=goal.quota,
        window_start=spend.window_start,
        window_end=now,
        spend=SpendTotals.model_validate(spend, from_attributes=True),  # the window's sums
        lifetime=spend.lifetime,
        remaining=remaining_of(goal.quota, spend),
        decision=decision,
    )
