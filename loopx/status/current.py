"""Each root's status cache in this process, and the calls that refresh, load and print it.

A long-lived process (the supervisor's loop, the HTTP server) keeps one
:class:`~loopx.status.cache.StatusCache` per root between calls, so it never
reloads the database; a one-shot CLI builds it once.
"""

from __future__ import annotations

import contextlib
from datetime import datetime
from pathlib import Path

from loopx import memo
from loopx.errors import LoopxError
from loopx.hostcanary import hosts_path
from loopx.process.collector import collector_paused
from loopx.root import Layout
from loopx.root.hints import changes_file
from loopx.status.cache import DEFAULT_FULL_SCAN_S, DEFAULT_TTL_S, LOCK_TIMEOUT_S, StatusCache
from loopx.status.database import StatusStore
from loopx.status.refresh import RefreshReport, StatusIndex
from loopx.status.sources import current_fleet_keyed
from loopx.status.view import StatusProjection
from loopx.status.warm import memo_key, memo_path
from loopx.storage.locks import locked

# One cache per root per process, so repeated calls (the supervisor's loop,
# the HTTP server) keep their memory instead of reloading every row.
_CACHES: dict[Path, StatusCache] = {}


def status_cache(layout: Layout) -> StatusCache:
    """The cache this process keeps for ``layout``'s root."""
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
    """Refresh the status database incrementally; what the supervisor calls each interval.

    Raises:
        LockTimeoutError: another process held the cache lock for a minute.
        CorruptFileError: the registry is damaged.

    """
    return status_cache(layout).refresh(
        now=now, ttl_s=ttl_s, full_scan_after_s=full_scan_after_s, force=force
    )


def current_status(layout: Layout, *, now: datetime) -> StatusProjection:
    """The attention queue as the last refresh of this process left it, the fleet read now."""
    return _current(status_cache(layout), now=now)[0]


def _current(
    cache: StatusCache, *, now: datetime
) -> tuple[StatusProjection, StatusIndex, dict[str, memo.Fingerprint] | None, float | None]:
    projection, index = cache.projection(), cache.index
    if projection is None or index is None:  # pragma: no cover - refresh always leaves an index
        msg = "status cache has no index after a refresh"
        raise LoopxError(msg)
    # The cache may be a few seconds old, written by a supervisor that has
    # stopped since: liveness is always read now (no stale "running").
    fleet, inputs, until = current_fleet_keyed(cache.layout, now=now)
    return projection.model_copy(update={"fleet": fleet}), index, inputs, until


def status_document(
    layout: Layout,
    *,
    now: datetime,
    ttl_s: float = DEFAULT_TTL_S,
    full_scan_after_s: float = DEFAULT_FULL_SCAN_S,
) -> bytes:
    """``loopx status --json``'s bytes, assembled from the cache and kept as a memo.

    The memo (:mod:`loopx.status.warm`) lets the next warm CLI print the same
    bytes without loading the cache while nothing it shows changed. The hint
    log's and the registry's fingerprints are taken before the refresh reads
    them: a write during this call leaves no memo that hides it.
    """
    cache = status_cache(layout)
    hints, registry = str(changes_file(layout)), str(layout.registry)
    hosts = str(hosts_path(layout))  # a quarantine is no goal's change: it leaves no hint
    before = {
        hints: memo.fingerprint(hints),
        registry: memo.fingerprint(registry),
        hosts: memo.fingerprint(hosts),
    }
    database = str(cache.store.path)
    with collector_paused():
        cache.refresh(now=now, ttl_s=ttl_s, full_scan_after_s=full_scan_after_s)
        before[database] = memo.fingerprint(database)  # as the refresh left it
        projection, index, fleet, until = _current(cache, now=now)
        document = cache.document(projection)
    if fleet is not None:
        memo.store(
            memo_path(layout),
            document,
            inputs=[*before, *fleet],
            before={**before, **fleet},
            computed_at=index.checked_at.timestamp(),
            valid_until=until,
            key=memo_key(layout),
        )
    return document


def clear_status_cache(layout: Layout) -> None:
    """Delete the cached projection (database, memo, hints); the next refresh rebuilds it."""
    store = StatusStore(layout)
    memo.private_dir(store.path.parent)
    with locked(store.lock_path, timeout=LOCK_TIMEOUT_S):
        memo.remove(memo_path(layout))
        with contextlib.suppress(FileNotFoundError):
            changes_file(layout).unlink()
        store.remove()
    _CACHES.pop(layout.root, None)
