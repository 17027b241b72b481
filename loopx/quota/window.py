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
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Final, NamedTuple

from pydantic import Field, model_validator

from loopx.model import Record, UtcDatetime, trusted

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


class SpendBucket(NamedTuple):
    """The spend of the turns that ended within one UTC minute (one row of :class:`SpendColumns`).

    ``last_end`` is epoch seconds (UTC); a microsecond timestamp survives the
    round trip through a float exactly.
    """

    minute: int  # floor(ended_at epoch seconds / 60)
    last_end: float  # the latest ended_at among them: the bucket leaves the window then
    wall_s: float
    cpu_s: float
    tokens: int
    cost_usd: float
    turns: int


COLUMNS: Final = SpendBucket._fields  # SpendColumns' fields, in order: a bucket's own


class SpendColumns(Record):
    """Minute buckets as parallel columns, ordered by minute (hence by ``last_end``).

    Columns rather than a list of objects: a decision reads every bucket of
    its window, and lists of numbers are parsed, sliced and summed in C, so
    the window's length barely shows in a decision's cost.
    """

    minute: list[int] = Field(default_factory=list)
    last_end: list[float] = Field(default_factory=list)  # epoch seconds, UTC
    wall_s: list[float] = Field(default_factory=list)
    cpu_s: list[float] = Field(default_factory=list)
    tokens: list[int] = Field(default_factory=list)
    cost_usd: list[float] = Field(default_factory=list)
    turns: list[int] = Field(default_factory=list)

    @model_validator(mode="after")
    def _aligned_and_ordered(self) -> SpendColumns:
        n = len(self.minute)
        if any(len(c) != n for c in self.lists()):
            msg = "bucket columns have different lengths"
            raise ValueError(msg)
        if self.minute != sorted(set(self.minute)):
            msg = "bucket minutes are not strictly increasing"
            raise ValueError(msg)
        return self

    def lists(self) -> list[list[Any]]:
        """The columns in field order (:data:`COLUMNS`), as they are (not copies)."""
        return [getattr(self, name) for name in COLUMNS]

    @classmethod
    def of(cls, columns: Iterable[list[Any]]) -> SpendColumns:
        """Columns in field order, unchecked: cut or folded from valid ones (:meth:`lists`)."""
        return cls.model_construct(None, **dict(zip(COLUMNS, columns, strict=True)))

    def __len__(self) -> int:
        return len(self.minute)

    def rows(self) -> list[SpendBucket]:
        """The buckets as tuples, oldest first."""
        return [SpendBucket(*row) for row in zip(*self.lists(), strict=True)]


class WindowSpend(Record):
    """What a goal spent in the window ``(window_start, now]``.

    ``buckets`` are the window's buckets, oldest first; ``should_run`` walks
    them to find when enough spend has slid out. ``lifetime`` is everything
    the ledger holds, window or not.
    """

    window_start: UtcDatetime
    wall_s: NonNegFloat = 0.0
    cpu_s: NonNegFloat = 0.0
    tokens: NonNegInt = 0
    cost_usd: NonNegFloat = 0.0
    turns: NonNegInt = 0
    buckets: SpendColumns = Field(default_factory=SpendColumns)
    lifetime: SpendTotals = Field(default_factory=SpendTotals)


def minute_of(ended_at: datetime) -> int:
    """The bucket index of a turn that ended at ``ended_at``."""
    return math.floor(ended_at.timestamp() / BUCKET_S)


class BucketFold:
    """Mutable accumulator folding spend lines into minute buckets, in ledger order.

    Used by both the incremental aggregate update and the full rebuild, so
    the two add the same floats in the same order and agree to the bit.
    Buckets before ``kept_minute`` are dropped: no window that may still be
    asked for reaches back to them.
    """

    __slots__ = ("cols", "kept_minute", "lifetime")

    def __init__(
        self,
        buckets: SpendColumns | None = None,
        *,
        kept_minute: int | None = None,
        lifetime: SpendTotals | None = None,
    ) -> None:
        self.kept_minute = kept_minute
        source = buckets if buckets is not None else SpendColumns()
        self.cols: list[list[Any]] = [list(c) for c in source.lists()]
        self.lifetime = lifetime if lifetime is not None else SpendTotals()

    def add(
        self, ended_at: datetime, *, wall_s: float, cpu_s: float, tokens: int, cost_usd: float
    ) -> None:
        """Fold one turn's spend."""
        self.lifetime = SpendTotals.model_construct(
            wall_s=self.lifetime.wall_s + wall_s,
            cpu_s=self.lifetime.cpu_s + cpu_s,
            tokens=self.lifetime.tokens + tokens,
            cost_usd=self.lifetime.cost_usd + cost_usd,
            turns=self.lifetime.turns + 1,
        )
        end = ended_at.timestamp()
        minute = math.floor(end / BUCKET_S)
        if self.kept_minute is not None and minute < self.kept_minute:
            return
        minutes, last_end, wall, cpu, tok, cost, turns = self.cols
        # Ledger lines arrive roughly in time order, so this is almost always an append.
        i = bisect_left(minutes, minute)
        if i < len(minutes) and minutes[i] == minute:
            last_end[i] = max(last_end[i], end)
            wall[i] += wall_s
            cpu[i] += cpu_s
            tok[i] += tokens
            cost[i] += cost_usd
            turns[i] += 1
            return
        for column, value in zip(
            self.cols, (minute, end, wall_s, cpu_s, tokens, cost_usd, 1), strict=True
        ):
            column.insert(i, value)

    def prune(self, kept_minute: int) -> None:
        """Drop buckets before ``kept_minute``; the boundary only moves forward."""
        if self.kept_minute is not None and kept_minute <= self.kept_minute:
            return
        self.kept_minute = kept_minute
        cut = bisect_left(self.cols[0], kept_minute)
        for column in self.cols:
            del column[:cut]

    def columns(self) -> SpendColumns:
        """The buckets folded so far."""
        return SpendColumns.of(list(c) for c in self.cols)


def in_window(buckets: SpendColumns, *, window_start: datetime) -> SpendColumns:
    """The buckets inside ``(window_start, ...]``: :func:`window_of`'s, without the sums."""
    # Buckets are ordered by last_end, so the window is a suffix of them.
    i = bisect_right(buckets.last_end, window_start.timestamp())
    if i == 0:  # nothing cut off (the usual case): the frozen buckets serve as they are
        return buckets
    return SpendColumns.of(c[i:] for c in buckets.lists())


def window_of(
    buckets: SpendColumns, *, window_start: datetime, lifetime: SpendTotals
) -> WindowSpend:
    """Sum the buckets inside ``(window_start, ...]`` into a :class:`WindowSpend`."""
    inside = in_window(buckets, window_start=window_start)
    # Every field given, as model_construct would hold them, without its per-field loop.
    return trusted(
        WindowSpend,
        {
            "window_start": window_start,
            "wall_s": math.fsum(inside.wall_s),
            "cpu_s": math.fsum(inside.cpu_s),
            "tokens": sum(inside.tokens),
            "cost_usd": math.fsum(inside.cost_usd),
            "turns": sum(inside.turns),
            "buckets": inside,
            "lifetime": lifetime,
        },
    )


def leaves_at(last_end: float, window: timedelta) -> datetime:
    """The instant a bucket whose last turn ended at ``last_end`` (epoch s) leaves the window."""
    return datetime.fromtimestamp(last_end, UTC) + window


def frees_at(
    last_end: Sequence[float], amounts: Sequence[float], cap: float, window: timedelta
) -> datetime | None:
    """When the windowed sum of ``amounts`` first drops below ``cap`` if nothing new is spent.

    ``last_end`` are the window's buckets' last end times (epoch seconds,
    ascending) and ``amounts[i]`` is bucket i's spend of the resource. The
    bucket with ``last_end`` e leaves at e + window exactly, so the answer is
    exact under this module's bucket rule.

    Returns:
        None when the sum is already below ``cap``.
    """
    if math.fsum(amounts) < cap or not last_end:
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
    return leaves_at(last_end[lo], window)
