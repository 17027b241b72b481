"""What a status refresh re-reads and what it writes. Pure.

The cache's records (:class:`CachedGoal`, a goal's row; :class:`StatusIndex`, the
meta row of :mod:`loopx.status.database`) and the three
decisions :class:`loopx.status.cache.StatusCache` runs between its reads:

1. :func:`plan_scan`: scan every goal's fingerprint, or only the hinted and
   leased ones;
2. :func:`goals_to_reread`: which goals' files changed (registry entry,
   fingerprint, quarantine entries, probe) or whose view expired by time;
3. :func:`next_index`: the index to write after the changed goals were
   re-projected.
"""

from __future__ import annotations

import heapq
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Final, Literal

from pydantic import Field

from loopx.history.reader import HistoryCounts
from loopx.model import Record, UtcDatetime
from loopx.registry.goalrecords import Goal, GoalStatus
from loopx.root.hints import HintCursor
from loopx.status.fingerprint import Fingerprint
from loopx.status.view import FleetView, GoalStatusView, ProbeObservation

HINT_LOG_MAX: Final = 1 << 20  # truncate the change log after a full scan past this size


@dataclass(frozen=True, slots=True)
class CachedGoal:
    """One goal's cached view and what it was computed from (its database row, parsed).

    Slots, not a model: a long-lived cache holds one per goal, and a model's
    ``__dict__`` and fields set cost 190 bytes more each.
    """

    # goal.json's (inode, mtime_ns, size) first: a new policy moves it. A tuple, the very one
    # the supervisor's FingerprintMemo holds: 100,000 goals' numbers are held once.
    fingerprint: Fingerprint
    # None in a cache that keeps no views once written (the supervisor's): its row holds it.
    view: GoalStatusView | None
    history: HistoryCounts
    epoch: int = 0  # the highest epoch seen (lease or history): claims so far
    recheck_ts: float | None = None  # view.recheck_at as POSIX seconds
    leased: bool = False  # view.lease is not None
    probe: ProbeObservation | None = None  # view.probe


class StatusIndex(Record):
    """The status database's meta row (:mod:`loopx.status.database`): what the goals' rows hold under."""

    schema_version: Literal[3] = 3
    generation: int  # raised by every write; a reader holding another one reloads
    writer: str  # random token of the process that wrote it
    generated_at: UtcDatetime  # when a view last changed
    checked_at: UtcDatetime  # when the sources were last checked (the TTL counts from here)
    full_scan_at: UtcDatetime
    goal_count: int
    registry_fp: list[int]
    quarantine_fp: list[int]
    probes_fp: list[int]
    hint_inode: int = 0
    hint_offset: int = 0
    fleet: FleetView
    quarantined_total: int = 0
    quarantine: dict[str, list[str]] = Field(default_factory=dict)


class RefreshReport(Record):
    """What one refresh did (`loopx refresh --json`)."""

    schema_version: Literal[1] = 1
    refreshed: bool  # False when the cache was younger than the TTL
    full_scan: bool
    goals: int
    reread: int  # goals whose files were read again
    # The hash buckets (crc32 mod 256) of the goals written: what this field has counted
    # since the cache's 256 shard files, kept so the document stays the same.
    shards_written: int
    checked_at: UtcDatetime
    # Goals whose view was re-projected or dropped (what `/events` announces); None when this
    # process reloaded another writer's cache and cannot tell. Not part of the JSON document.
    changed: frozenset[str] | None = Field(default=frozenset(), exclude=True)


@dataclass(frozen=True, slots=True)
class SharedSources:
    """The root-wide sources one refresh looked at (fingerprints, and what they list)."""

    registry_fp: list[int]
    quarantine_fp: list[int]
    probes_fp: list[int]
    quarantine: Mapping[str, tuple[str, ...]]  # entries by goal
    quarantined_total: int
    probes: Mapping[str, ProbeObservation] | None  # None: not re-read (unchanged)
    fleet: FleetView
    hints: HintCursor


def full_scan_due(
    index: StatusIndex | None, *, now: datetime, full_scan_after_s: float, force: bool
) -> bool:
    """Whether this refresh scans every goal's fingerprint whatever the hints say."""
    return force or index is None or (now - index.full_scan_at).total_seconds() >= full_scan_after_s


def plan_scan(
    index: StatusIndex | None,
    *,
    goals: Collection[str],
    hinted: set[str] | None,
    leased: Iterable[str],
    now: datetime,
    full_scan_after_s: float,
    force: bool,
) -> tuple[bool, set[str]]:
    """Whether this refresh is a full scan, and the goals whose fingerprints it reads.

    ``hinted`` is None when the change log was replaced (hints were lost).
    Without a full scan, the hinted goals and those that held a lease last
    time are read: every turn writes under a lease, and its release is a change.
    """
    full = hinted is None or full_scan_due(
        index, now=now, full_scan_after_s=full_scan_after_s, force=force
    )
    if full:
        return True, set(goals)
    return False, {g for g in (hinted or set()) | set(leased) if g in goals}


def changed_in_registry(
    active: Mapping[str, Goal], cached: Mapping[str, CachedGoal]
) -> tuple[list[str], set[str]]:
    """Cached goals gone from the registry, and active goals not cached.

    A cached goal whose policy changed since shows it in its fingerprint
    (``goal.json`` is part of it), found by its hint or the full scan.
    """
    removed = [g for g in cached if g not in active]
    dirty = {goal_id for goal_id in active if goal_id not in cached}
    return removed, dirty


def changed_in_catalog(
    active: dict[str, Goal],
    cached: Mapping[str, CachedGoal],
    *,
    catalog: Mapping[str, Goal],
    changed: Iterable[str],
) -> tuple[list[str], set[str]]:
    """Apply the goal index's changed ids to ``active`` (updated in place).

    Returns:
        The goals gone or archived that were active or cached, and the
        other changed goals: all re-projected, since the index names a goal
        only when one of its files was written.
    """
    removed: list[str] = []
    dirty: set[str] = set()
    for goal_id in changed:
        goal = catalog.get(goal_id)
        if goal is None or goal.status is GoalStatus.ARCHIVED:
            if active.pop(goal_id, None) is not None or goal_id in cached:
                removed.append(goal_id)
        else:
            active[goal_id] = goal
            dirty.add(goal_id)
    return removed, dirty


def goals_to_reread(
    *,
    goals: Collection[str],
    cached: Mapping[str, CachedGoal],
    fingerprints: Mapping[str, Fingerprint],
    expired: Iterable[str],
    quarantine_before: Mapping[str, tuple[str, ...]],
    sources: SharedSources,
) -> set[str]:
    """The goals whose view must be projected again.

    A goal is re-read when its fingerprint differs from the cached one, its
    view expired by time, its quarantine entries or its probe changed.
    """
    dirty = {g for g, fp in fingerprints.items() if g not in cached or cached[g].fingerprint != fp}
    dirty.update(expired)
    after = sources.quarantine
    dirty.update(g for g in set(quarantine_before) ^ set(after) if g in goals)
    dirty.update(g for g in after if quarantine_before.get(g) != after[g] and g in goals)
    if sources.probes is not None:
        probes = sources.probes
        dirty.update(
            g for g in goals if (cached[g].probe if g in cached else None) != probes.get(g)
        )
    return dirty


def next_index(
    previous: StatusIndex | None,
    *,
    writer: str,
    now: datetime,
    full: bool,
    views_changed: bool,
    goal_count: int,
    sources: SharedSources,
    checked_at: datetime | None = None,
) -> StatusIndex:
    """The index written after a refresh that checked the sources at ``now``.

    ``generated_at`` moves only when a view or the fleet changed, so a reader
    can tell how old the newest change is. ``checked_at`` (``now`` unless
    given) stays where it was after a refresh that read only the hints.
    """
    changed = views_changed or previous is None or sources.fleet != previous.fleet
    full_scan_at = now if full or previous is None else previous.full_scan_at
    return StatusIndex(
        generation=(previous.generation + 1) if previous else 1,
        writer=writer,
        generated_at=now if changed or previous is None else previous.generated_at,
        checked_at=now if checked_at is None else checked_at,
        full_scan_at=full_scan_at,
        goal_count=goal_count,
        registry_fp=sources.registry_fp,
        quarantine_fp=sources.quarantine_fp,
        probes_fp=sources.probes_fp,
        hint_inode=sources.hints.inode,
        hint_offset=sources.hints.offset,
        fleet=sources.fleet,
        quarantined_total=sources.quarantined_total,
        quarantine={g: list(v) for g, v in sources.quarantine.items()},
    )


def pop_expired(
    rechecks: list[tuple[float, str]], goals: Mapping[str, CachedGoal], now: datetime
) -> set[str]:
    """Goals whose cached view expires by time at ``now``, popped from the recheck heap."""
    out: set[str] = set()
    now_ts = now.timestamp()
    while rechecks and rechecks[0][0] <= now_ts:
        ts, goal_id = heapq.heappop(rechecks)
        cached = goals.get(goal_id)
        if cached is not None and cached.recheck_ts == ts:  # else a stale heap entry
            out.add(goal_id)
    return out
