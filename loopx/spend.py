"""Window spend: what a goal spent in a sliding time window, in minute buckets.

A turn's spend is charged at the instant its host ended (``ended_at``).
Turns that ended within the same clock minute (UTC, ``floor(epoch / 60)``)
share one :class:`SpendBucket`, and a bucket stays in the window until its
*last* turn has left it: a bucket whose ``last_end`` is ``e`` counts in the
window ``(start, now]`` while ``e > start``, so it leaves at exactly
``e + window``. When turns are at least a minute apart this is per-turn
exact; otherwise spend leaves the window up to a minute late, never early.

The minute grouping is what keeps the aggregate (``quota.agg.json``) bounded
by the window's length instead of the ledger's, and it is the *definition*
of window membership: the aggregate and a full re-read of the ledger agree
exactly because both apply it.

Everything here is pure: records in, records out, no files and no clock.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Annotated, Final

from pydantic import Field

from loopx.model import Record, UtcDatetime

BUCKET_S: Final = 60  # width of a spend bucket, seconds

NonNegFloat = Annotated[float, Field(ge=0.0)]
NonNegInt = Annotated[int, Field(ge=0)]


class SpendTotals(Record):
    """Summed spend of some turns."""

    wall_s: NonNegFloat = 0.0
    cpu_s: NonNegFloat = 0.0
    tokens: NonNegInt = 0
    cost_usd: NonNegFloat = 0.0
    turns: NonNegInt = 0

    def plus(self, other: SpendTotals) -> SpendTotals:
        """The sum of two totals."""
        return SpendTotals.model_construct(
            wall_s=self.wall_s + other.wall_s,
            cpu_s=self.cpu_s + other.cpu_s,
            tokens=self.tokens + other.tokens,
            cost_usd=self.cost_usd + other.cost_usd,
            turns=self.turns + other.turns,
        )


class SpendBucket(Record):
    """The spend of the turns that ended within one UTC minute."""

    minute: int  # floor(ended_at epoch seconds / 60)
    last_end: UtcDatetime  # the latest ended_at among them: the bucket leaves the window then
    wall_s: NonNegFloat = 0.0
    cpu_s: NonNegFloat = 0.0
    tokens: NonNegInt = 0
    cost_usd: NonNegFloat = 0.0
    turns: NonNegInt = 0


class WindowSpend(Record):
    """What a goal spent in the window ``(window_start, now]``.

    ``buckets`` are the window's buckets ordered by ``last_end`` (oldest
    first); ``should_run`` walks them to find when enough spend has slid out.
    ``lifetime`` is everything the ledger holds, window or not.
    """

    window_start: UtcDatetime
    wall_s: NonNegFloat = 0.0
    cpu_s: NonNegFloat = 0.0
    tokens: NonNegInt = 0
    cost_usd: NonNegFloat = 0.0
    turns: NonNegInt = 0
    buckets: list[SpendBucket] = Field(default_factory=list)
    lifetime: SpendTotals = Field(default_factory=SpendTotals)


def minute_of(ended_at: datetime) -> int:
    """The bucket index of a turn that ended at ``ended_at``."""
    return math.floor(ended_at.timestamp() / BUCKET_S)


def minute_start(minute: int) -> datetime:
    """The first instant of bucket ``minute``."""
    return datetime.fromtimestamp(minute * BUCKET_S, UTC)


class BucketFold:
    """Mutable accumulator folding spend lines into minute buckets, in ledger order.

    Used by both the incremental aggregate update and the full rebuild, so
    the two add the same floats in the same order and agree to the bit.
    Buckets before ``kept_minute`` are dropped: no window that may still be
    asked for reaches back to them.
    """

    __slots__ = ("buckets", "kept_minute", "lifetime")

    def __init__(
        self,
        buckets: Iterable[SpendBucket] = (),
        *,
        kept_minute: int | None = None,
        lifetime: SpendTotals | None = None,
    ) -> None:
        self.kept_minute = kept_minute
        self.buckets: dict[int, SpendBucket] = {b.minute: b for b in buckets}
        self.lifetime = lifetime if lifetime is not None else SpendTotals()

    def add(
        self, ended_at: datetime, *, wall_s: float, cpu_s: float, tokens: int, cost_usd: float
    ) -> None:
        """Fold one turn's spend."""
        one = SpendTotals.model_construct(
            wall_s=wall_s, cpu_s=cpu_s, tokens=tokens, cost_usd=cost_usd, turns=1
        )
        self.lifetime = self.lifetime.plus(one)
        minute = minute_of(ended_at)
        if self.kept_minute is not None and minute < self.kept_minute:
            return
        old = self.buckets.get(minute)
        if old is None:
            self.buckets[minute] = SpendBucket.model_construct(
                minute=minute, last_end=ended_at, **one.model_dump()
            )
            return
        self.buckets[minute] = SpendBucket.model_construct(
            minute=minute,
            last_end=max(old.last_end, ended_at),
            wall_s=old.wall_s + wall_s,
            cpu_s=old.cpu_s + cpu_s,
            tokens=old.tokens + tokens,
            cost_usd=old.cost_usd + cost_usd,
            turns=old.turns + 1,
        )

    def prune(self, kept_minute: int) -> None:
        """Drop buckets before ``kept_minute``; the boundary only moves forward."""
        if self.kept_minute is not None and kept_minute <= self.kept_minute:
            return
        self.kept_minute = kept_minute
        self.buckets = {m: b for m, b in self.buckets.items() if m >= kept_minute}

    def sorted_buckets(self) -> list[SpendBucket]:
        """The buckets, oldest minute first."""
        return [self.buckets[m] for m in sorted(self.buckets)]


def window_of(
    buckets: Iterable[SpendBucket], *, window_start: datetime, lifetime: SpendTotals
) -> WindowSpend:
    """Sum the buckets inside ``(window_start, ...]`` into a :class:`WindowSpend`."""
    inside = sorted(
        (b for b in buckets if b.last_end > window_start), key=lambda b: (b.last_end, b.minute)
    )
    return WindowSpend.model_construct(
        window_start=window_start,
        wall_s=math.fsum(b.wall_s for b in inside),
        cpu_s=math.fsum(b.cpu_s for b in inside),
        tokens=sum(b.tokens for b in inside),
        cost_usd=math.fsum(b.cost_usd for b in inside),
        turns=sum(b.turns for b in inside),
        buckets=inside,
        lifetime=lifetime,
    )


def frees_at(
    buckets: Sequence[SpendBucket], amounts: Sequence[float], cap: float, window: timedelta
) -> datetime | None:
    """When the windowed sum of ``amounts`` first drops below ``cap`` if nothing new is spent.

    ``buckets`` are ordered by ``last_end`` and ``amounts[i]`` is bucket i's
    spend of the resource. The bucket with ``last_end`` e leaves at e +
    window exactly, so the answer is exact under this module's bucket rule.

    Returns:
        None when the sum is already below ``cap``.
    """
    if math.fsum(amounts) < cap:
        return None
    # The suffix sums are non-increasing in k (amounts are >= 0 and fsum rounds
    # exactly), so binary-search the first k whose remainder is below the cap.
    # fsum of the remainder is what a decision at that later time computes.
    lo, hi = 0, len(amounts) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if math.fsum(amounts[mid + 1 :]) < cap:
            hi = mid
        else:
            lo = mid + 1
    return buckets[lo].last_end + window if buckets else None
