"""The quota window's account: a window's spend against each budget of a policy. Pure.

This is the one window algorithm. :func:`quota_view` turns a policy, the
spend of the window ending at ``now`` (summed by :func:`loopx.quota.window.window_of`
from the minute buckets that :func:`loopx.quota.ledger.window_spend` reads)
and ``now`` into a :class:`QuotaView`: allowance, spend, what is left, which
budget is spent first and when enough spend has left the window to run
again. ``should_run``, ``loopx status`` and ``/metrics`` all take their window
numbers from it, so they cannot disagree about a goal at the same instant.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Final

from pydantic import Field

from loopx.model import Record, UtcDatetime, as_utc, trusted
from loopx.quota.window import SpendColumns, SpendTotals, WindowSpend, frees_at, window_of
from loopx.registry.quota_policy import QuotaPolicy


class Budget(StrEnum):
    """A budget of the quota window, in the order a refusal names them."""

    WALL = "wall"  # turn wall time against compute x window
    CPU = "cpu"  # cpu_seconds
    TOKENS = "tokens"  # max_tokens
    COST = "cost"  # max_cost_usd


class QuotaView(Record):
    """A goal's compute spend in its sliding window, against its allowance."""

    compute: float
    window_hours: float
    window_start: UtcDatetime
    allowance_wall_s: float
    spent_wall_s: float
    remaining_wall_s: float
    cpu_allowance_s: float | None
    spent_cpu_s: float
    spent_tokens: int
    spent_cost_usd: float
    turns_in_window: int
    exhausted: Budget | None  # the first spent budget, in Budget's order
    refills_at: UtcDatetime | None  # when every spent budget has room again, nothing new spent


_NO_LIFETIME: Final = SpendTotals()  # spend_at's window carries no lifetime (frozen, so shared)


class QuotaRemaining(Record):
    """What is left of each budget in the window; None where the policy sets no cap."""

    wall_s: Annotated[float, Field(ge=0.0)]
    cpu_s: Annotated[float, Field(ge=0.0)] | None = None
    tokens: Annotated[int, Field(ge=0)] | None = None
    cost_usd: Annotated[float, Field(ge=0.0)] | None = None


def spend_at(policy: QuotaPolicy, buckets: SpendColumns, *, now: datetime) -> WindowSpend:
    """The spend of the window ending at ``now``, from buckets reaching back at least that far."""
    return window_of(buckets, window_start=policy.window_start(now), lifetime=_NO_LIFETIME)


def _caps(policy: QuotaPolicy, spend: WindowSpend) -> list[tuple[Budget, Sequence[float], float]]:
    buckets = spend.buckets
    caps: list[tuple[Budget, Sequence[float], float]] = [
        (Budget.WALL, buckets.wall_s, policy.allowance_wall_s)
    ]
    if policy.cpu_seconds is not None:
        caps.append((Budget.CPU, buckets.cpu_s, policy.cpu_seconds))
    if policy.max_tokens is not None:
        caps.append((Budget.TOKENS, buckets.tokens, float(policy.max_tokens)))
    if policy.max_cost_usd is not None:
        caps.append((Budget.COST, buckets.cost_usd, policy.max_cost_usd))
    return caps


def quota_view(policy: QuotaPolicy, spend: WindowSpend, *, now: datetime) -> QuotaView:
    """``spend`` (the window ending at ``now``) against ``policy``'s budgets.

    A compute share of 0 is a pause, not a spent budget: no budget is
    reported exhausted then.
    """
    exhausted: Budget | None = None
    refills: datetime | None = None
    if policy.compute > 0:
        for budget, amounts, cap in _caps(policy, spend):
            at = frees_at(spend.buckets.last_end, amounts, cap, policy.window)
            if at is not None:
                exhausted = exhausted or budget
                at = max(at, now)
                refills = at if refills is None else max(refills, at)
    allowance = policy.allowance_wall_s
    # Every value is a validated record's or computed here with its field's type (the tests
    # compare the view with a validated twin): only the timestamps get their field's check.
    return trusted(
        QuotaView,
        {
            "compute": policy.compute,
            "window_hours": policy.window_hours,
            "window_start": as_utc(spend.window_start),
            "allowance_wall_s": allowance,
            "spent_wall_s": spend.wall_s,
            "remaining_wall_s": max(0.0, allowance - spend.wall_s),
            "cpu_allowance_s": policy.cpu_seconds,
            "spent_cpu_s": spend.cpu_s,
            "spent_tokens": spend.tokens,
            "spent_cost_usd": spend.cost_usd,
            "turns_in_window": spend.turns,
            "exhausted": exhausted,
            "refills_at": as_utc(refills) if refills is not None else None,
        },
    )


def remaining_of(policy: QuotaPolicy, spend: WindowSpend) -> QuotaRemaining:
    """What is left of each budget of ``policy`` after ``spend``."""
    return QuotaRemaining(
        wall_s=max(0.0, policy.allowance_wall_s - spend.wall_s),
        cpu_s=None if policy.cpu_seconds is None else max(0.0, policy.cpu_seconds - spend.cpu_s),
        tokens=None if policy.max_tokens is None else max(0, policy.max_tokens - spend.tokens),
        cost_usd=None
        if policy.max_cost_usd is None
        else max(0.0, policy.max_cost_usd - spend.cost_usd),
    )
