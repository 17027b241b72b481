"""The status projection, cached in one SQLite database and refreshed incrementally.

The database (:mod:`loopx.status.database`, in this host's cache directory)
holds each goal's view and the fingerprint of the files it was read from,
and a meta row (:class:`StatusIndex`): when the sources were last checked,
the shared sources' fingerprints, the fleet summary, the hint cursor. A
refresh writes the goals that changed in one transaction, so its cost
follows the number of changed goals, not the number of goals.

A refresh finds changed goals by, in order: the registry's fingerprint (a
changed policy), the change hints (``projections/changes.log``, read on
every call, even inside the TTL: a status shows every write made before it),
goals that held a lease at the last refresh (every turn's writes
happen under a lease, and the release itself is a change), goals whose view
expires by time (``recheck_at``), and, every ``full_scan_after_s`` seconds or
when hints were lost, a scan of every goal's fingerprint. Only goals whose
fingerprint differs are re-read, and then only the tail of their history.
"""

from __future__ import annotations

import contextlib
import dataclasses
import heapq
import secrets
import sqlite3
import time
import zlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final

from loopx.accounts.outputs import account_summaries
from loopx.errors import LoopxError, resource_fault
from loopx.hostcanary import quarantined_kinds
from loopx.log import get_logger
from loopx.memo import fingerprint as file_fingerprint
from loopx.memo import private_dir
from loopx.model import utcnow
from loopx.process.collector import collector_paused
from loopx.registry.catalog import goal_catalog
from loopx.registry.goalrecords import Goal, GoalStatus, Registry
from loopx.root import Layout
from loopx.root.hints import HintCursor, hinted_since, read_hints, reset_hints
from loopx.status.database import StatusStore
from loopx.status.fingerprint import Fingerprint, goal_fingerprint
from loopx.status.queue import assemble
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
    pop_expired,
)
from loopx.status.reread import read_shared, reread_goal
from loopx.status.view import GoalStatusView, StatusProjection, json_bytes
from loopx.status.viewbytes import document_bytes, view_bytes
from loopx.status.watch import FingerprintMemo
from loopx.storage.dirs import ensure_dir
from loopx.storage.locks import locked

DEFAULT_TTL_S: Final = 5.0
DEFAULT_FULL_SCAN_S: Final = 60.0
LOCK_TIMEOUT_S: Final = 60.0
_SAME_TICK_NS: Final = 50_000_000
_BUCKETS: Final = 256  # what RefreshReport.shards_written counts in (see there)

log = get_logger(__name__)


@dataclass(slots=True)
class StatusCache:
    """An in-memory copy of the cache that refreshes itself incrementally.

    A long-lived holder (the supervisor, ``loopx serve``) keeps it between
    refreshes and so never reloads the database; a short-lived one (the CLI)
    loads it once.
    """

    layout: Layout
    index: StatusIndex | None = None
    goals: dict[str, CachedGoal] = field(default_factory=dict)
    registry: Registry | None = None
    active: dict[str, Goal] = field(default_factory=dict)  # the registry's non-archived goals
    store: StatusStore = field(init=False)
    _leased: set[str] = field(default_factory=set)  # goals whose cached view holds a lease
    _rechecks: list[tuple[float, str]] = field(default_factory=list)  # heap of (recheck_ts, goal)
    # The document bytes of the views projected by this process's last refresh.
    _fresh: dict[str, bytes] = field(default_factory=dict)
    # No usable database was loaded: the next write replaces it whole.
    _rebuild: bool = True
    _writer: str = field(default_factory=lambda: secrets.token_hex(8))
    # The database file's fingerprint as this cache last loaded or wrote it.
    _database: tuple[int, int, int] | None = None
    # A long-lived refresher (the supervisor) remembers fingerprints between full scans.
    memo: FingerprintMemo | None = None
    # Keep the views, and the written views' bytes for the next document (the CLI prints one
    # right after its refresh). The supervisor prints none and keeps neither once a row is
    # written (about 1 KB a goal live); asked for a projection, it loads them for good.
    keep_views: bool = True

    def __post_init__(self) -> None:
        self.store = StatusStore(self.layout)

    # --- loading ---------------------------------------------------------------------------

    def load(self) -> bool:
        """Load the meta row and every goal's row; False when there is no usable database."""
        loaded = self.store.load(views=self.keep_views)
        self.index = loaded.index if loaded is not None else None
        self.goals = loaded.goals if loaded is not None else {}
        self._rebuild = loaded is None
        self._database = file_fingerprint(self.store.path) if loaded is not None else None
        self._fresh = {}
        self.registry = None
        self._leased = {g for g, c in self.goals.items() if c.leased}
        self._rechecks = [
            (c.recheck_ts, g) for g, c in self.goals.items() if c.recheck_ts is not None
        ]
        heapq.heapify(self._rechecks)
        return loaded is not None

    def _in_sync_with_disk(self) -> bool:
        fp = file_fingerprint(self.store.path)
        # Nobody wrote since: one stat, not a query (the server and the supervisor ask every
        # second or so); a file changed within _SAME_TICK_NS may have been written again in the
        # same mtime tick (the kernel's coarse clock moves every few milliseconds).
        if fp == self._database and time.time_ns() - fp[1] > _SAME_TICK_NS:
            return True
        disk = self.store.read_index()
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
        if not self.keep_views:
            # A holder of no views asked for them: from now on it keeps them.
            self.keep_views = True
            with locked(self.store.lock_path, timeout=LOCK_TIMEOUT_S):
                self.load()
            if self.index is None:  # the database went since the refresh: project afresh
                self.refresh(now=utcnow(), force=True)
            if self.index is None:  # pragma: no cover - a refresh always leaves an index
                return None
        return assemble(
            (c.view for c in self.goals.values() if c.view is not None),
            fleet=self.index.fleet,
            generated_at=self.index.generated_at,
            checked_at=self.index.checked_at,
            quarantined_total=self.index.quarantined_total,
            # Read at every answer: a parked account, a quarantined host kind show at once.
            accounts=account_summaries(self.layout, now=utcnow()),
            hosts=quarantined_kinds(self.layout),
        )

    def document(self, projection: StatusProjection) -> bytes:
        r"""``json_bytes(projection, indent=2) + b"\n"``: the head, then each goal's stored view bytes.

        ``projection`` is :meth:`projection`'s (its fleet may be replaced): a
        goal whose view is the cached one is printed as its row holds it; one
        the crash-loop overlay changed is serialized here.
        """
        head = json_bytes(projection.model_copy(update={"goals": []}), indent=2)
        views = projection.goals
        if not views:
            return head + b"\n"
        goals, fresh = self.goals, self._fresh
        stored: Mapping[str, bytes] = {}
        wanted = [v.goal_id for v in views if v.goal_id not in fresh]
        if wanted:
            with locked(self.store.lock_path, timeout=LOCK_TIMEOUT_S):
                if self._in_sync_with_disk() and not self._rebuild:
                    stored = self.store.views(wanted if len(wanted) * 2 < len(views) else None)

        def known(view: GoalStatusView) -> bytes | None:
            cached = goals.get(view.goal_id)
            if cached is None or cached.view is not view:
                return None
            return fresh.get(view.goal_id) or stored.get(view.goal_id)

        return document_bytes(head, views, known)

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

        Inside ``ttl_s`` of the last check (and without ``force``) only the
        change hints are read, and only the goals they name re-read: a write
        made before this call is always shown. ``full_scan_after_s``
        bounds how long a change made without a hint (and outside a lease)
        can stay unseen; 0 scans every goal's fingerprint on every refresh
        past the TTL.
        """
        ensure_dir(self.layout.projections_dir)
        private_dir(self.store.path.parent)
        with locked(self.store.lock_path, timeout=LOCK_TIMEOUT_S), collector_paused():
            reloaded = self.index is not None and not self._in_sync_with_disk()
            if self.index is None or reloaded:
                self.load()
            index = self.index
            # A young cache is served as it is while no hint came and the registry is the
            # same: a damaged registry must be reported, not hidden behind the cache.
            young = (
                index is not None
                and not force
                and (now - index.checked_at).total_seconds() < ttl_s
                and list(file_fingerprint(self.layout.registry)) == index.registry_fp
            )
            if (
                young
                and index is not None
                and not hinted_since(self.layout, HintCursor(index.hint_inode, index.hint_offset))
            ):
                return RefreshReport(
                    refreshed=False,
                    full_scan=False,
                    goals=len(self.goals),
                    reread=0,
                    shards_written=0,
                    checked_at=index.checked_at,
                    changed=None if reloaded else frozenset[str](),
                )
            report = self._refresh_locked(
                now=now,
                full_scan_after_s=float("inf") if young else full_scan_after_s,
                force=force,
                hints_only=young,
            )
            return report.model_copy(update={"changed": None}) if reloaded else report

    def _refresh_locked(
        self, *, now: datetime, full_scan_after_s: float, force: bool, hints_only: bool
    ) -> RefreshReport:
        layout, index = self.layout, self.index
        self._fresh = {}
        registry_fp = list(file_fingerprint(layout.registry))
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
        # Hinted and leased goals are fingerprinted afresh; a full scan's others may be remembered.
        exact = candidates if not full or hinted is None else {*hinted, *self._leased}
        fingerprints = {g: self._fingerprint(g, exact=g in exact) for g in candidates}
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
            expired=pop_expired(self._rechecks, self.goals, now),
            quarantine_before=quarantine_before,
            sources=sources,
        )
        for goal_id in dirty:
            self._reproject(goal_id, fingerprints.get(goal_id), sources, now=now)
        written = [g for g in dirty if g in self.goals]
        self._fresh = dict(zip(written, view_bytes(self._views(written)), strict=True))
        self.index = next_index(
            index,
            writer=self._writer,
            now=now,
            full=full,
            views_changed=bool(dirty or removed),
            goal_count=len(self.goals),
            sources=sources,
            checked_at=index.checked_at if hints_only and index is not None else now,
        )
        self._write(removed)
        if not self.keep_views and not self._rebuild:  # written: the rows hold the views
            self._fresh = {}
            entries = self.goals
            for goal_id in written:
                entries[goal_id] = dataclasses.replace(entries[goal_id], view=None)
        log.debug("status_refreshed", full_scan=full, reread=len(dirty), written=len(written))
        return RefreshReport(
            refreshed=True,
            full_scan=full,
            goals=len(self.goals),
            reread=len(dirty),
            shards_written=len({zlib.crc32(g.encode()) % _BUCKETS for g in [*dirty, *removed]}),
            checked_at=now,
            changed=frozenset(dirty.union(removed)),
        )

    def _write(self, removed: Iterable[str]) -> None:
        """Write the changed rows and the meta row; a disk that refuses is skipped (logged).

        The cache is rebuilt from the durable files, and on a full disk status
        is what an operator reads to learn why. After a refused
        write the next one replaces the database whole.
        """
        if self.index is None:  # pragma: no cover - a refresh always leaves an index
            return
        rebuild = self._rebuild
        goals, fresh = self.goals, self._fresh
        if rebuild:
            missing = [g for g in goals if g not in fresh]
            fresh.update(zip(missing, view_bytes(self._views(missing)), strict=True))
        changed = {g: (goals[g], fresh[g]) for g in fresh}
        with _cache_write(self):
            self._database = None
            self.store.write(self.index, changed=changed, removed=removed, replace_all=rebuild)
            self._database = file_fingerprint(self.store.path)
            self._rebuild = False

    def _views(self, goal_ids: list[str]) -> list[GoalStatusView]:
        """The views of ``goal_ids`` to write, each projected by this process or loaded."""
        out = []
        for goal_id in goal_ids:
            view = self.goals[goal_id].view
            if view is None:  # pragma: no cover - a view is dropped only once its row is written
                msg = (
                    f"status cache: goal {goal_id!r} has no view in memory to write; "
                    "run `loopx status --clear-cache` and report this"
                )
                raise LoopxError(msg)
            out.append(view)
        return out

    def _fingerprint(self, goal_id: str, *, exact: bool = True) -> Fingerprint:
        goal_dir = f"{self.layout.goals_dir}/{goal_id}"
        if self.memo is None:
            return goal_fingerprint(goal_dir)
        cached = self.goals.get(goal_id)
        known = cached.fingerprint if cached is not None else None
        return self.memo.fingerprint(goal_dir, exact=exact, known=known, key=goal_id)

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
            removed, dirty = changed_in_registry(self.active, self.goals)
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

    def _reproject(
        self, goal_id: str, fp: Fingerprint | None, sources: SharedSources, *, now: datetime
    ) -> None:
        """Read one goal's files again and cache its new view."""
        if fp is None:
            fp = self._fingerprint(goal_id)
        cached = reread_goal(
            self.layout, self.active[goal_id], fp, self.goals.get(goal_id), sources, now=now
        )
        self.goals[goal_id] = cached
        if cached.leased:
            self._leased.add(goal_id)
        else:
            self._leased.discard(goal_id)
        if cached.recheck_ts is not None:
            heapq.heappush(self._rechecks, (cached.recheck_ts, goal_id))

    def _drop(self, goal_id: str) -> None:
        self.goals.pop(goal_id, None)
        self._fresh.pop(goal_id, None)
        self._leased.discard(goal_id)


@contextlib.contextmanager
def _cache_write(cache: StatusCache) -> Iterator[None]:
    try:
        yield
    except (OSError, sqlite3.Error) as e:
        reason = resource_fault(e) if isinstance(e, OSError) else f"status database: {e}"
        if reason is None:
            raise
        cache._rebuild = True  # noqa: SLF001 - the cache's own helper
        log.warning("status_cache_not_written", reason=reason)
