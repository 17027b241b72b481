"""The status projection, cached and refreshed incrementally.

Layout under ``projections/``:

* ``status.json``: the index (:class:`StatusIndex`): when the sources were
  last checked, fingerprints of the shared sources, the fleet summary.
* ``status.d/NN.json``: 256 shards (:class:`StatusShard`) holding each goal's
  cached view and the fingerprint of the files it was read from. A refresh
  rewrites only the shards of goals that changed, so its cost follows the
  number of changed goals, not the number of goals.
* ``changes.log``: hints appended by writers (:func:`note_goal_changed`).

A refresh finds changed goals by, in order: the registry's fingerprint (a
changed policy), the change hints, goals that held a lease at the last
refresh (every turn's writes happen under a lease, and the release itself is
a change), goals whose view expires by time (``recheck_at``), and, every
``full_scan_after_s`` seconds or when hints were lost, a scan of every goal's
``(inode, mtime_ns, size)`` fingerprint. Only goals whose fingerprint differs are
re-read, and then only the tail of their history.
"""

from __future__ import annotations

import contextlib
import hashlib
import heapq
import os
import secrets
import shutil
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Final, Literal

import structlog
from pydantic import Field

from loopx.errors import LoopxError
from loopx.model import Record, UtcDatetime
from loopx.registry.catalog import goal_catalog
from loopx.registry.model import Goal, GoalStatus, Registry
from loopx.root import Layout
from loopx.status.changes import changes_file
from loopx.status.projection import (
    FleetView,
    GoalStatusView,
    ProbeObservation,
    StatusProjection,
    assemble,
    fleet_view,
    project_goal,
)
from loopx.status.sources import (
    HintCursor,
    HistoryCounts,
    count_history,
    gather_goal,
    goal_fingerprint,
    probes_dir,
    quarantine_fingerprint,
    quarantine_listing,
    read_fleet,
    read_hints,
    read_probes,
    reset_hints,
    stat_pair,
)
from loopx.storage.files import atomic_write_model, ensure_dir, parse_model, read_bytes
from loopx.storage.locks import locked

SHARDS: Final = 256
SHARD_DIR: Final = "status.d"
DEFAULT_TTL_S: Final = 5.0
DEFAULT_FULL_SCAN_S: Final = 60.0
_HINT_LOG_MAX: Final = 1 << 20  # truncate the change log after a full scan past this size
_LOCK_TIMEOUT_S: Final = 60.0

log = structlog.get_logger(__name__)


class CachedGoal(Record):
    """One goal's cached view and what it was computed from."""

    fingerprint: list[int]
    policy: str  # digest of the goal's registry entry
    view: GoalStatusView
    history: HistoryCounts = Field(default_factory=HistoryCounts)
    epoch: int = 0  # the highest epoch seen (lease or history): claims so far
    recheck_ts: float | None = None  # view.recheck_at as POSIX seconds


class StatusShard(Record):
    """``projections/status.d/NN.json``: the cached goals whose id hashes to NN."""

    schema_version: Literal[1] = 1
    goals: dict[str, CachedGoal] = Field(default_factory=dict)


class StatusIndex(Record):
    """``projections/status.json``: the cache's index."""

    schema_version: Literal[1] = 1
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


@dataclass(frozen=True, slots=True)
class RefreshReport:
    """What one refresh did."""

    refreshed: bool  # False when the cache was younger than the TTL
    full_scan: bool
    goals: int
    reread: int  # goals whose files were read again
    shards_written: int
    checked_at: datetime


def shard_of(goal_id: str) -> int:
    """The shard a goal's cached view lives in."""
    return zlib.crc32(goal_id.encode()) % SHARDS


def shard_dir(layout: Layout) -> Path:
    """``projections/status.d/``."""
    return layout.projections_dir / SHARD_DIR


def shard_file(layout: Layout, shard: int) -> Path:
    """``projections/status.d/NN.json``."""
    return shard_dir(layout) / f"{shard:02x}.json"


def _policy_digest(goal: Goal) -> str:
    return hashlib.blake2b(goal.model_dump_json().encode(), digest_size=12).hexdigest()


def _ts(value: datetime | None) -> float | None:
    return value.timestamp() if value is not None else None


@dataclass(slots=True)
class StatusCache:
    """An in-memory copy of the cache that refreshes itself incrementally.

    A long-lived holder (the supervisor, ``loopx serve``) keeps it between
    refreshes and so never reloads the shards; a short-lived one (the CLI)
    loads them once.
    """

    layout: Layout
    index: StatusIndex | None = None
    goals: dict[str, CachedGoal] = field(default_factory=dict)
    registry: Registry | None = None
    active: dict[str, Goal] = field(default_factory=dict)  # the registry's non-archived goals
    _leased: set[str] = field(default_factory=set)  # goals whose cached view holds a lease
    _rechecks: list[tuple[float, str]] = field(default_factory=list)  # heap of (recheck_ts, goal)
    _members: dict[int, set[str]] = field(default_factory=dict)  # shard -> goal ids
    _writer: str = field(default_factory=lambda: secrets.token_hex(8))

    # --- loading ---------------------------------------------------------------------------

    def _disk_index(self) -> StatusIndex | None:
        path = self.layout.status_file
        try:
            return parse_model(path, StatusIndex, read_bytes(path))
        except FileNotFoundError:
            return None
        except (LoopxError, OSError) as e:
            log.warning("status_cache_unreadable", path=str(path), error=str(e))
            return None

    def load(self) -> bool:
        """Load the index and every shard from disk; False when there is no usable cache."""
        index = self._disk_index()
        goals: dict[str, CachedGoal] = {}
        if index is not None:
            for shard in range(SHARDS):
                path = shard_file(self.layout, shard)
                try:
                    goals.update(parse_model(path, StatusShard, read_bytes(path)).goals)
                except FileNotFoundError:
                    continue
                except (LoopxError, OSError) as e:
                    log.warning("status_shard_unreadable", path=str(path), error=str(e))
                    index = None  # a lost shard means lost goals: rebuild
                    break
        self.index, self.goals = index, (goals if index is not None else {})
        self.registry = None
        self._index_memory()
        return index is not None

    def _in_sync_with_disk(self) -> bool:
        disk = self._disk_index()
        return (
            disk is not None
            and self.index is not None
            and (disk.generation, disk.writer) == (self.index.generation, self.index.writer)
        )

    # --- reading ---------------------------------------------------------------------------

    def projection(self) -> StatusProjection | None:
        """The assembled attention queue from memory (None before the first refresh)."""
        if self.index is None:
            return None
        return assemble(
            (c.view for c in self.goals.values()),
            fleet=self.index.fleet,
            generated_at=self.index.generated_at,
            checked_at=self.index.checked_at,
            quarantined_total=self.index.quarantined_total,
        )

    # --- refreshing ------------------------------------------------------------------------

    def refresh(
        self,
        *,
        now: datetime,
        ttl_s: float = DEFAULT_TTL_S,
        full_scan_after_s: float = DEFAULT_FULL_SCAN_S,
        force: bool = False,
    ) -> RefreshReport:
        """Bring the cache up to date with the root's files, re-reading only changed goals.

        Nothing is read when the cache was checked less than ``ttl_s`` ago
        (unless ``force``). ``full_scan_after_s`` bounds how long a change
        made without a hint (and outside a lease) can stay unseen; 0 scans
        every goal's fingerprint on every refresh.
        """
        ensure_dir(self.layout.projections_dir)
        with locked(self.layout.status_file, timeout=_LOCK_TIMEOUT_S):
            if self.index is None or not self._in_sync_with_disk():
                self.load()
            index = self.index
            if index is not None and not force and (now - index.checked_at).total_seconds() < ttl_s:
                return RefreshReport(False, False, len(self.goals), 0, 0, index.checked_at)
            return self._refresh_locked(now=now, full_scan_after_s=full_scan_after_s, force=force)

    def _refresh_locked(
        self, *, now: datetime, full_scan_after_s: float, force: bool
    ) -> RefreshReport:
        layout, index = self.layout, self.index
        registry_fp = list(stat_pair(str(layout.registry)))
        dirty: set[str] = set()
        removed: list[str] = []
        # Goals: new, removed and changed policies, from the goal index (O(changed goals)
        # after the first refresh of this process, which compares every goal once).
        catalog = goal_catalog(layout)
        changed_ids = catalog.refresh(now=now)
        if self.registry is None:
            self.registry = catalog.registry()
            self.active = {
                g.id: g for g in self.registry.goals.values() if g.status is not GoalStatus.ARCHIVED
            }
            removed = [g for g in self.goals if g not in self.active]
            # A policy changed since the cache was written shows in the goal's
            # fingerprint (goal.json is part of it) through its hint or the full scan.
            dirty.update(g for g in self.active if g not in self.goals)
            check: Iterable[str] = ()
        else:
            for goal_id in changed_ids:
                goal = catalog.goals.get(goal_id)
                if goal is None or goal.status is GoalStatus.ARCHIVED:
                    if self.active.pop(goal_id, None) is not None or goal_id in self.goals:
                        removed.append(goal_id)
                else:
                    self.active[goal_id] = goal
            check = [g for g in changed_ids if g in self.active]
        for goal_id in removed:
            self._drop(goal_id)
        for goal_id in check:
            cached = self.goals.get(goal_id)
            if cached is None or cached.policy != _policy_digest(self.active[goal_id]):
                dirty.add(goal_id)
        goals = self.active

        # Hints, or a full fingerprint scan when due or when hints were lost.
        cursor = HintCursor(index.hint_inode, index.hint_offset) if index else HintCursor()
        hinted, cursor = read_hints(layout, cursor)
        full = (
            force
            or index is None
            or hinted is None
            or (now - index.full_scan_at).total_seconds() >= full_scan_after_s
        )
        candidates: Iterable[str]
        if full:
            candidates = goals
        else:
            candidates = {g for g in (hinted or set()) | self._leased if g in goals}
        fingerprints: dict[str, tuple[int, ...]] = {}
        goals_dir = str(layout.goals_dir)
        for goal_id in candidates:
            fp = goal_fingerprint(os.path.join(goals_dir, goal_id))
            fingerprints[goal_id] = fp
            cached = self.goals.get(goal_id)
            if cached is None or tuple(cached.fingerprint) != fp:
                dirty.add(goal_id)

        # Views that expire by time alone.
        now_ts = now.timestamp()
        while self._rechecks and self._rechecks[0][0] <= now_ts:
            ts, goal_id = heapq.heappop(self._rechecks)
            cached = self.goals.get(goal_id)
            if cached is not None and cached.recheck_ts == ts:  # else a stale heap entry
                dirty.add(goal_id)

        # Shared sources: quarantine and probes (directory fingerprints), the fleet (always).
        quarantine_fp = quarantine_fingerprint(layout)
        quarantine = {g: tuple(v) for g, v in index.quarantine.items()} if index else {}
        quarantined_total = index.quarantined_total if index else 0
        if full or index is None or quarantine_fp != index.quarantine_fp:
            new_quarantine, quarantined_total = quarantine_listing(layout, set(goals))
            dirty.update(g for g in set(quarantine) ^ set(new_quarantine) if g in goals)
            dirty.update(g for g in new_quarantine if quarantine.get(g) != new_quarantine[g])
            quarantine = new_quarantine
        probes_fp = list(stat_pair(str(probes_dir(layout))))
        probes: dict[str, ProbeObservation] | None = None
        if full or index is None or probes_fp != index.probes_fp:
            probes = read_probes(layout)
            dirty.update(
                g
                for g in goals
                if (self.goals[g].view.probe if g in self.goals else None) != probes.get(g)
            )
        fleet, beats = read_fleet(layout)
        fleet_summary = fleet_view(fleet, beats, now=now)

        # Re-read and re-project what changed.
        touched_shards: set[int] = {shard_of(g) for g in removed}
        for goal_id in dirty:
            goal = goals[goal_id]
            fp = fingerprints.get(goal_id) or goal_fingerprint(os.path.join(goals_dir, goal_id))
            previous = self.goals.get(goal_id)
            probe = (
                probes.get(goal_id)
                if probes is not None
                else (previous.view.probe if previous else None)
            )
            inputs = gather_goal(
                layout, goal, now=now, quarantined=quarantine.get(goal_id, ()), probe=probe
            )
            view = project_goal(inputs, now=now)
            counts = count_history(
                layout.history_file(goal_id), previous.history if previous else HistoryCounts()
            )
            epoch = max(
                counts.max_epoch,
                inputs.lease.epoch if inputs.lease else 0,
                previous.epoch if previous else 0,
            )
            self._store(
                goal_id,
                CachedGoal(
                    fingerprint=list(fp),
                    policy=_policy_digest(goal),
                    view=view,
                    history=counts,
                    epoch=epoch,
                    recheck_ts=_ts(view.recheck_at),
                ),
            )
            touched_shards.add(shard_of(goal_id))

        if full:
            full_scan_at = now
            if cursor.offset > _HINT_LOG_MAX:
                cursor = reset_hints(layout)
        else:
            full_scan_at = index.full_scan_at if index else now
        changed = bool(touched_shards) or index is None or fleet_summary != index.fleet
        self._write(touched_shards)
        self.index = StatusIndex(
            generation=(index.generation + 1) if index else 1,
            writer=self._writer,
            generated_at=now if changed or index is None else index.generated_at,
            checked_at=now,
            full_scan_at=full_scan_at,
            goal_count=len(self.goals),
            registry_fp=registry_fp,
            quarantine_fp=quarantine_fp,
            probes_fp=probes_fp,
            hint_inode=cursor.inode,
            hint_offset=cursor.offset,
            fleet=fleet_summary,
            quarantined_total=quarantined_total,
            quarantine={g: list(v) for g, v in quarantine.items()},
        )
        atomic_write_model(layout.status_file, self.index, durable=False, indent=None)
        log.debug("status_refreshed", full_scan=full, reread=len(dirty), shards=len(touched_shards))
        return RefreshReport(True, full, len(self.goals), len(dirty), len(touched_shards), now)

    def _store(self, goal_id: str, cached: CachedGoal) -> None:
        self.goals[goal_id] = cached
        self._members.setdefault(shard_of(goal_id), set()).add(goal_id)
        if cached.view.lease is not None:
            self._leased.add(goal_id)
        else:
            self._leased.discard(goal_id)
        if cached.recheck_ts is not None:
            heapq.heappush(self._rechecks, (cached.recheck_ts, goal_id))

    def _drop(self, goal_id: str) -> None:
        self.goals.pop(goal_id, None)
        self._members.get(shard_of(goal_id), set()).discard(goal_id)
        self._leased.discard(goal_id)

    def _index_memory(self) -> None:
        """Rebuild the in-memory helpers (leased set, recheck heap) from ``goals``."""
        self._leased = {g for g, c in self.goals.items() if c.view.lease is not None}
        self._rechecks = [
            (c.recheck_ts, g) for g, c in self.goals.items() if c.recheck_ts is not None
        ]
        heapq.heapify(self._rechecks)
        self._members = {}
        for goal_id in self.goals:
            self._members.setdefault(shard_of(goal_id), set()).add(goal_id)

    def _write(self, shards: set[int]) -> None:
        if not shards:
            return
        ensure_dir(shard_dir(self.layout))
        for s in shards:
            members = {
                g: self.goals[g] for g in sorted(self._members.get(s, ())) if g in self.goals
            }
            path = shard_file(self.layout, s)
            if members:
                atomic_write_model(path, StatusShard(goals=members), durable=False, indent=None)
            else:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()


# --- module-level API --------------------------------------------------------------------------

# One cache per root per process, so repeated calls (the supervisor's loop,
# the HTTP server) keep their memory instead of reloading every shard.
_CACHES: dict[Path, StatusCache] = {}


def status_cache(layout: Layout) -> StatusCache:
    """This process's cache for ``layout``'s root."""
    cache = _CACHES.get(layout.root)
    if cache is None or cache.layout != layout:
        cache = _CACHES[layout.root] = StatusCache(layout)
    return cache


def refresh_status(
    layout: Layout,
    *,
    now: datetime,
    ttl_s: float = DEFAULT_TTL_S,
    full_scan_after_s: float = DEFAULT_FULL_SCAN_S,
    force: bool = False,
) -> RefreshReport:
    """Refresh ``projections/status.json`` incrementally; what the supervisor calls each interval.

    Raises:
        LockTimeoutError: another process held the cache lock for a minute.
        CorruptFileError: the registry is damaged.

    """
    return status_cache(layout).refresh(
        now=now, ttl_s=ttl_s, full_scan_after_s=full_scan_after_s, force=force
    )


def load_status(
    layout: Layout,
    *,
    now: datetime,
    ttl_s: float = DEFAULT_TTL_S,
    full_scan_after_s: float = DEFAULT_FULL_SCAN_S,
    force: bool = False,
) -> StatusProjection:
    """The attention queue, refreshed first when the cache is older than ``ttl_s``."""
    cache = status_cache(layout)
    cache.refresh(now=now, ttl_s=ttl_s, full_scan_after_s=full_scan_after_s, force=force)
    projection = cache.projection()
    if projection is None:  # pragma: no cover - refresh always leaves an index
        msg = "status cache has no index after a refresh"
        raise LoopxError(msg)
    return projection


def clear_status_cache(layout: Layout) -> None:
    """Delete the cached projection (index, shards, hints); the next refresh rebuilds it."""
    with locked(layout.status_file, timeout=_LOCK_TIMEOUT_S):
        for path in (layout.status_file, changes_file(layout)):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        with contextlib.suppress(FileNotFoundError):
            shutil.rmtree(shard_dir(layout))
    _CACHES.pop(layout.root, None)
