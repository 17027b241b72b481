"""The status projection, cached and refreshed incrementally.

Layout under ``projections/``:

* ``status.json``: the index (:class:`StatusIndex`): when the sources were
  last checked, fingerprints of the shared sources, the fleet summary.
* ``status.d/``: each goal's cached view and the fingerprint of the files it
  was read from, in 256 shards (:mod:`loopx.status.shards`); a refresh
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
import heapq
import os
import secrets
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final

from loopx.accounts.views import account_summaries
from loopx.collector import collector_paused
from loopx.errors import LoopxError, resource_fault
from loopx.forked import Forked
from loopx.hints import HintCursor, read_hints, reset_hints
from loopx.log import get_logger
from loopx.model import utcnow
from loopx.registry.catalog import goal_catalog
from loopx.registry.model import Goal, GoalStatus, Registry
from loopx.root import Layout
from loopx.status.fingerprint import Fingerprint, goal_fingerprint
from loopx.status.prefetch import Fingerprints
from loopx.status.projection import assemble, project_unrun
from loopx.status.refresh import (
    HINT_LOG_MAX,
    CachedGoal,
    RefreshReport,
    SharedSources,
    StatusIndex,
    changed_in_catalog,
    changed_in_registry,
    full_scan_due,
    goals_to_reread,
    next_index,
    plan_scan,
)
from loopx.status.reread import read_shared, reread_goal
from loopx.status.shards import (
    SHARDS,
    ensure_shard_dir,
    read_shards,
    remove_others,
    remove_pack,
    shard_of,
    write_pack,
    write_shard,
)
from loopx.status.snapshot import stat_pair
from loopx.status.unrun import bulk_entry, plain_unrun, unrun_entry
from loopx.status.view import StatusProjection
from loopx.status.watch import FingerprintMemo
from loopx.storage.files import (
    atomic_write_model,
    ensure_dir,
    parse_model,
    read_bytes,
)
from loopx.storage.locks import locked

DEFAULT_TTL_S: Final = 5.0
DEFAULT_FULL_SCAN_S: Final = 60.0
LOCK_TIMEOUT_S: Final = 60.0

log = get_logger(__name__)


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
    # Goals that never ran, by when their view was projected: written compactly.
    _unrun: dict[str, datetime] = field(default_factory=dict)
    # Such goals loaded from the shards, not yet rebuilt: their fingerprint, projected at.
    _pending: dict[str, tuple[list[int], datetime]] = field(default_factory=dict)
    _files: set[int] = field(default_factory=set)  # shards on disk in a file of their own
    _packed: set[int] = field(default_factory=set)  # shards with a line in the pack on disk
    # Rebuilt from the goals' files (no usable cache was loaded): what status.d/ holds is
    # not known, and the first write leaves only what it writes.
    _rebuilt: bool = False
    _writer: str = field(default_factory=lambda: secrets.token_hex(8))
    # A long-lived refresher (the supervisor) remembers fingerprints between full scans.
    memo: FingerprintMemo | None = None

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
        read = read_shards(self.layout) if index is not None else None
        self.index = index if read is not None else None
        self.goals = read.goals if read is not None else {}
        self._pending = read.unrun if read is not None else {}
        self._files = read.files if read is not None else set()
        self._packed = read.packed if read is not None else set()
        self._rebuilt = read is None
        self._unrun = {}
        self.registry = None
        self._index_memory()
        return index is not None

    def _rebuild_unrun(self, active: Mapping[str, Goal]) -> list[str]:
        """Rebuild the views of the loaded goals that never ran; returns those no longer active.

        Those stay pending until the caller drops them (and rewrites their
        shards). Each is projected from its policy at the time it was first projected, so
        it is the view that was written. A goal whose ``goal.json`` changed since
        is rebuilt from the newer policy meanwhile: its fingerprint differs from
        the stored one, so the usual fingerprint check re-projects it.
        """
        pending, self._pending = self._pending, {}
        gone: list[str] = []
        for goal_id, (fp, at) in pending.items():
            goal = active.get(goal_id)
            if goal is None:
                gone.append(goal_id)
                self._pending[goal_id] = fp, at
                continue
            self._store(goal_id, unrun_entry(fp, project_unrun(goal, now=at)), projected_at=at)
        return gone

    def _active_in_catalog(self, now: datetime) -> dict[str, Goal]:
        """The goal index's active goals, for a cache served without a refresh."""
        catalog = goal_catalog(self.layout)
        catalog.refresh(now=now, verify=False)
        return {g: v for g, v in catalog.goals.items() if v.status is not GoalStatus.ARCHIVED}

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
            # Read at every answer: a parked account shows at once (issue 27).
            accounts=account_summaries(self.layout, now=utcnow()),
        )

    # --- refreshing ------------------------------------------------------------------------

    def refresh(
        self,
        *,
        now: datetime,
        ttl_s: float = DEFAULT_TTL_S,
        full_scan_after_s: float = DEFAULT_FULL_SCAN_S,
        force: bool = False,
        prefetch: Forked[Fingerprints] | None = None,
    ) -> RefreshReport:
        """Bring the cache up to date with the root's files, re-reading only changed goals.

        Nothing is read when the cache was checked less than ``ttl_s`` ago
        (unless ``force``). ``full_scan_after_s`` bounds how long a change
        made without a hint (and outside a lease) can stay unseen; 0 scans
        every goal's fingerprint on every refresh. A scan of every goal
        takes its fingerprints from ``prefetch`` where it can (the caller
        closes it).
        """
        ensure_dir(self.layout.projections_dir)
        with locked(self.layout.status_file, timeout=LOCK_TIMEOUT_S), collector_paused():
            reloaded = self.index is not None and not self._in_sync_with_disk()
            if self.index is None or reloaded:
                self.load()
            index = self.index
            # A young cache is served as it is, unless the registry changed since:
            # a damaged registry must be reported, not hidden behind the cache.
            if (
                index is not None
                and not force
                and (now - index.checked_at).total_seconds() < ttl_s
                and list(stat_pair(str(self.layout.registry))) == index.registry_fp
            ):
                if self._pending:  # loaded just now: the next refresh syncs the goals again
                    self._rebuild_unrun(self._active_in_catalog(now))
                changed = None if reloaded else frozenset[str]()
                return RefreshReport(
                    refreshed=False,
                    full_scan=False,
                    goals=len(self.goals),
                    reread=0,
                    shards_written=0,
                    checked_at=index.checked_at,
                    changed=changed,
                )
            report = self._refresh_locked(
                now=now, full_scan_after_s=full_scan_after_s, force=force, prefetch=prefetch
            )
            return report.model_copy(update={"changed": None}) if reloaded else report

    def _refresh_locked(
        self,
        *,
        now: datetime,
        full_scan_after_s: float,
        force: bool,
        prefetch: Forked[Fingerprints] | None = None,
    ) -> RefreshReport:
        layout, index = self.layout, self.index
        registry_fp = list(stat_pair(str(layout.registry)))
        # A full scan below stats every active goal's goal.json: the goal index need not too.
        scan_all = full_scan_due(index, now=now, full_scan_after_s=full_scan_after_s, force=force)
        removed, dirty = self._sync_goals(now, verify=not scan_all)
        goals = self.active

        hinted, cursor = read_hints(
            layout, HintCursor(index.hint_inode, index.hint_offset) if index else HintCursor()
        )
        full, candidates = plan_scan(
            index,
            goals=goals,
            hinted=hinted,
            leased=self._leased,
            now=now,
            full_scan_after_s=full_scan_after_s,
            force=force,
        )
        goals_dir = str(layout.goals_dir)
        # Hinted and leased goals are fingerprinted afresh; a full scan's others may be remembered.
        exact = candidates if not full or hinted is None else {*hinted, *self._leased}
        # Early fingerprints (loopx.status.prefetch) may be older than a hint: they only stand
        # in for a goal not cached yet (read anyway) or one not hinted or leased.
        early = (prefetch.result() if prefetch is not None and full else None) or {}
        fingerprints: dict[str, Fingerprint] = {}
        cached = self.goals
        for g in candidates:
            fp = early.get(g) if g not in exact or g not in cached else None
            if fp is None:
                fp = self._fingerprint(os.path.join(goals_dir, g), exact=g in exact)
            fingerprints[g] = fp
        if full and scan_all:
            gone, moved = self._confirm_goal_files(fingerprints)
            removed.extend(gone)
            dirty = (dirty | moved).difference(gone)
            for goal_id in gone:
                fingerprints.pop(goal_id, None)
        if full and cursor.offset > HINT_LOG_MAX:
            cursor = reset_hints(layout)
        quarantine_before = {g: tuple(v) for g, v in index.quarantine.items()} if index else {}
        sources = read_shared(
            layout, index, full=full, goals=goals, now=now, registry_fp=registry_fp, hints=cursor
        )
        dirty |= goals_to_reread(
            goals=goals,
            cached=self.goals,
            fingerprints=fingerprints,
            expired=self._expired(now),
            quarantine_before=quarantine_before,
            sources=sources,
        )

        touched = {shard_of(g) for g in removed}
        touched.update(self._reproject_all(dirty, fingerprints, sources, now=now))
        with _cache_write():
            self._write(touched)
        self.index = next_index(
            index,
            writer=self._writer,
            now=now,
            full=full,
            views_changed=bool(touched),
            goal_count=len(self.goals),
            sources=sources,
        )
        with _cache_write():
            atomic_write_model(layout.status_file, self.index, durable=False, indent=None)
        log.debug("status_refreshed", full_scan=full, reread=len(dirty), shards=len(touched))
        return RefreshReport(
            refreshed=True,
            full_scan=full,
            goals=len(self.goals),
            reread=len(dirty),
            shards_written=len(touched),
            checked_at=now,
            changed=frozenset(dirty.union(removed)),
        )

    def _fingerprint(self, goal_dir: str, *, exact: bool) -> Fingerprint:
        if self.memo is None:
            return goal_fingerprint(goal_dir)
        return self.memo.fingerprint(goal_dir, exact=exact)

    def _sync_goals(self, now: datetime, *, verify: bool) -> tuple[list[str], set[str]]:
        """Goals removed, and goals new or with a changed policy, from the goal index.

        O(changed goals) after this process's first refresh, which compares
        every goal once; a policy changed since the cache was written shows in
        the goal's fingerprint (``goal.json`` is part of it) through its hint
        or the full scan. Without ``verify`` the index is not checked against
        every goal file (the caller's full scan does it: :meth:`_confirm_goal_files`).
        """
        catalog = goal_catalog(self.layout)
        changed_ids = catalog.refresh(now=now, verify=verify)
        if self.registry is None:
            self.registry = catalog.registry()
            self.active = {
                g.id: g for g in self.registry.goals.values() if g.status is not GoalStatus.ARCHIVED
            }
            gone = self._rebuild_unrun(self.active)
            removed, dirty = changed_in_registry(self.active, self.goals)
            removed.extend(gone)  # their shards are rewritten without them
        else:
            removed, dirty = changed_in_catalog(
                self.active, self.goals, catalog=catalog.goals, changed=changed_ids
            )
        for goal_id in removed:
            self._drop(goal_id)
        return removed, dirty

    def _confirm_goal_files(
        self, fingerprints: Mapping[str, Fingerprint]
    ) -> tuple[list[str], set[str]]:
        """Re-read the goal files whose fingerprint (its first three numbers) the goal index lacks.

        Returns:
            The goals gone or archived since, and those whose policy is new.
        """
        catalog = goal_catalog(self.layout)
        # A goal whose directory is gone has the empty fingerprint: its goal file is missing too.
        observed = {g: fp[:3] or (0, 0, -1) for g, fp in fingerprints.items()}
        changed = catalog.reread(catalog.moved(observed))
        if not changed:
            return [], set()
        removed, dirty = changed_in_catalog(
            self.active, self.goals, catalog=catalog.goals, changed=changed
        )
        for goal_id in removed:
            self._drop(goal_id)
        return removed, dirty

    def _expired(self, now: datetime) -> set[str]:
        """Goals whose cached view expires by time at ``now`` (popped from the recheck heap)."""
        out: set[str] = set()
        now_ts = now.timestamp()
        while self._rechecks and self._rechecks[0][0] <= now_ts:
            ts, goal_id = heapq.heappop(self._rechecks)
            cached = self.goals.get(goal_id)
            if cached is not None and cached.recheck_ts == ts:  # else a stale heap entry
                out.add(goal_id)
        return out

    def _reproject_all(
        self,
        dirty: set[str],
        fingerprints: Mapping[str, Fingerprint],
        sources: SharedSources,
        *,
        now: datetime,
    ) -> set[int]:
        """:meth:`_reproject` every goal of ``dirty``, in its order; returns their shards.

        Goals that never ran and have nothing else to say (most of a cold refresh) get
        their entry from :mod:`loopx.status.unrun`, the one :meth:`_reproject` would
        make, without its reads and checks.
        """
        cached, active = self.goals, self.active
        quarantine, probes = sources.quarantine, sources.probes
        touched: set[int] = set()
        for goal_id in dirty:
            shard = shard_of(goal_id)
            touched.add(shard)
            fp = fingerprints.get(goal_id)
            if not plain_unrun(goal_id, fp, cached=cached, quarantine=quarantine, probes=probes):
                self._reproject(goal_id, fp, sources, now=now)
                continue
            assert fp is not None  # noqa: S101 - plain_unrun says so
            entry, compact = bulk_entry(active[goal_id], fp, now=now)
            self._store(goal_id, entry, projected_at=now if compact else None)
        return touched

    def _reproject(
        self, goal_id: str, fp: Fingerprint | None, sources: SharedSources, *, now: datetime
    ) -> None:
        """Read one goal's files again and cache its new view."""
        if fp is None:
            fp = self._fingerprint(os.path.join(str(self.layout.goals_dir), goal_id), exact=True)
        entry, projected_at = reread_goal(
            self.layout, self.active[goal_id], fp, self.goals.get(goal_id), sources, now=now
        )
        self._store(goal_id, entry, projected_at=projected_at)

    def _store(
        self, goal_id: str, cached: CachedGoal, *, projected_at: datetime | None = None
    ) -> None:
        self.goals[goal_id] = cached
        if projected_at is not None:
            self._unrun[goal_id] = projected_at
        else:
            self._unrun.pop(goal_id, None)
        self._members.setdefault(shard_of(goal_id), set()).add(goal_id)
        if cached.view.lease is not None:
            self._leased.add(goal_id)
        else:
            self._leased.discard(goal_id)
        if cached.recheck_ts is not None:
            heapq.heappush(self._rechecks, (cached.recheck_ts, goal_id))

    def _drop(self, goal_id: str) -> None:
        self.goals.pop(goal_id, None)
        self._unrun.pop(goal_id, None)
        self._pending.pop(goal_id, None)
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
        """Write the shards of ``shards``: in one pack when they are most of them, else each."""
        if not shards and not self._rebuilt:
            return
        layout = self.layout
        ensure_shard_dir(layout)
        if len(shards) > SHARDS // 2:  # a cold refresh: one file created, not 256
            self._packed = write_pack(layout, ((s, *self._shard(s)) for s in range(SHARDS)))
            self._files, self._rebuilt = set(), False
            return
        if self._rebuilt:  # every goal was re-projected, so `shards` names every one with goals
            remove_others(layout, keep=shards)
            self._files, self._packed, self._rebuilt = set(), set(), False
        for s in shards:
            if write_shard(layout, s, *self._shard(s), shadow=s in self._packed):
                self._files.add(s)
            else:
                self._files.discard(s)
        if self._packed and self._packed <= self._files:  # no line of the pack is read
            remove_pack(layout)
            self._packed = set()

    def _shard(
        self, shard: int
    ) -> tuple[dict[str, CachedGoal], dict[str, tuple[list[int], datetime]]]:
        """One shard's goals as stored: full entries, and goals that never ran (compact)."""
        goals, unrun = self.goals, self._unrun
        members: dict[str, CachedGoal] = {}
        compact: dict[str, tuple[list[int], datetime]] = {}
        for g in sorted(self._members.get(shard, ())):
            cached = goals.get(g)
            if cached is None:
                continue
            at = unrun.get(g)
            if at is None:
                members[g] = cached
            else:
                compact[g] = (cached.fingerprint, at)
        return members, compact


@contextlib.contextmanager
def _cache_write() -> Iterator[None]:
    """A cache write the disk refuses (full, read-only) is skipped: status is served from memory.

    The cache is rebuilt from the durable files, and on a full disk status
    is what an operator reads to learn why (issue 18).
    """
    try:
        yield
    except OSError as e:
        reason = resource_fault(e)
        if reason is None:
            raise
        log.warning("status_cache_not_written", reason=reason)
