"""Budgets over a rolling window, on an account and for the whole root: pure arithmetic.

Spend is kept in minute buckets (``accounts/<name>/spend.json``, and
``accounts/.root/spend.json`` for the root), written by each turn of a
budgeted account (fenced by turn key) and trimmed to the window. A breach is
the first cap reached, tokens before cost; it clears when enough old spend
leaves the window (``refills_at``) or a human raises the cap.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Final, Literal

from pydantic import Field

from loopx.accounts.records import APPLIED_KEPT, AccountBudget, WindowTotals
from loopx.model import Record, UtcDatetime

MINUTE_S: Final = 60
ROOT_BUDGET: Final = ".root"  # not a valid account name: the whole root's budget and spend


class SpendBucket(Record):
    """One minute's spend: tokens, cost, and the part of the cost that is estimated."""

    minute: int  # POSIX seconds of the minute's start
    tokens: int = 0
    cost_usd: float = 0.0
    estimated_usd: float = 0.0


class AccountSpend(Record):
    """``accounts/<name>/spend.json``: a budgeted account's recent spend, by minute."""

    schema_version: Literal[1] = 1
    name: str
    buckets: list[SpendBucket] = Field(default_factory=list)
    applied: list[str] = Field(default_factory=list)
    updated_at: UtcDatetime | None = None


class Breach(Record):
    """A spent budget: what, how much, the cap, and when the window refills below it."""

    what: Literal["tokens", "cost"]
    spent: float
    cap: float
    window_hours: float
    refills_at: UtcDatetime

    def question(self, who: str) -> str:
        """The gate's words: what was spent, how to raise it, when it refills."""
        if self.what == "tokens":
            spent, cap = f"{self.spent:,.0f} of {self.cap:,.0f} tokens", f"{int(self.cap * 2)}"
        else:
            spent, cap = f"${self.spent:,.2f} of ${self.cap:,.2f}", f"{self.cap * 2:g}"
        return (
            f"{who} spent {spent} in {self.window_hours:g} h; answer `raise {cap}`, "
            f"or wait until {self.refills_at.astimezone(UTC):%Y-%m-%d %H:%M} UTC"
        )


def estimated_cost(
    input_tokens: int, output_tokens: int, price_in: float | None, price_out: float | None
) -> float:
    """The cost of a turn whose host reported tokens but no cost, from the account's prices."""
    return input_tokens / 1e6 * (price_in or 0.0) + output_tokens / 1e6 * (price_out or 0.0)


def added(
    spend: AccountSpend,
    key: str,
    *,
    at: datetime,
    tokens: int,
    cost_usd: float,
    estimated_usd: float,
    keep_hours: float,
) -> AccountSpend:
    """``spend`` with one turn's spend added in its minute, and buckets older than the window gone.

    A key applied before changes nothing. Pure.
    """
    if key in spend.applied:
        return spend
    minute = int(at.timestamp()) // MINUTE_S * MINUTE_S
    oldest = at.timestamp() - keep_hours * 3600 - MINUTE_S
    buckets = [b for b in spend.buckets if b.minute >= oldest]
    if buckets and buckets[-1].minute == minute:
        last = buckets[-1]
        buckets[-1] = last.model_copy(
            update={
                "tokens": last.tokens + tokens,
                "cost_usd": last.cost_usd + cost_usd,
                "estimated_usd": last.estimated_usd + estimated_usd,
            }
        )
    else:
        buckets.append(
            SpendBucket(
                minute=minute, tokens=tokens, cost_usd=cost_usd, estimated_usd=estimated_usd
            )
        )
    return spend.model_copy(
        update={
            "buckets": buckets,
            "applied": [*spend.applied, key][-APPLIED_KEPT:],
            "updated_at": at,
        }
    )


def _inside(spend: AccountSpend, window_hours: float, now: datetime) -> list[SpendBucket]:
    start = now.timestamp() - window_hours * 3600
    # A minute counts while any of it is inside the window (its turns leave with its end).
    return [b for b in spend.buckets if b.minute + MINUTE_S > start]


def totals(spend: AccountSpend, window_hours: float, now: datetime) -> WindowTotals:
    """What the window holds. Pure."""
    inside = _inside(spend, window_hours, now)
    return WindowTotals(
        tokens=sum(b.tokens for b in inside),
        cost_usd=sum(b.cost_usd for b in inside),
        estimated_usd=sum(b.estimated_usd for b in inside),
        window_hours=window_hours,
    )


def breach(budget: AccountBudget, spend: AccountSpend, now: datetime) -> Breach | None:
    """The first cap the window's spend reached (tokens, then cost), or None. Pure."""
    inside = _inside(spend, budget.window_hours, now)
    for what, cap, value in (
        ("tokens", budget.max_tokens, lambda b: float(b.tokens)),
        ("cost", budget.max_cost_usd, lambda b: b.cost_usd),
    ):
        if cap is None:
            continue
        spent = sum(value(b) for b in inside)
        if spent < cap:
            continue
        # Refills when enough of the oldest minutes left the window to be under the cap.
        left = spent
        refill = now
        for bucket in inside:
            left -= value(bucket)
            refill = datetime.fromtimestamp(bucket.minute + MINUTE_S, UTC) + timedelta(
                hours=budget.window_hours
            )
            if left < cap:
                break
        return Breach(
            what=what,
            spent=spent,
            cap=float(cap),
            window_hours=budget.window_hours,
            refills_at=max(refill, now),
        )
    return None


def raised(budget: AccountBudget, breach_of: Breach, answer: str) -> AccountBudget | None:
    """The budget an answer ``raise N`` asks for (the breached cap set to N), else None. Pure."""
    words = answer.strip().split()
    if len(words) != 2 or words[0].lower() != "raise":  # noqa: PLR2004 - "raise N"
        return None
    try:
        value = float(words[1].replace(",", "").lstrip("$"))
    except ValueError:
        return None
    if not math.isfinite(value) or value <= breach_of.spent:
        return None
    if breach_of.what == "tokens":
        return budget.model_copy(update={"max_tokens": int(value)})
    return budget.model_copy(update={"max_cost_usd": value})
