"""Each root's status cache in this process, and the calls that refresh, load and print it.

A long-lived process (the supervisor's loop, the HTTP server) keeps one
:class:`~loopx.status.cache.StatusCache` per root between calls, so it never
reloads the shards; a one-shot CLI builds it once.
"""

from __future__ import annotations

import contextlib
from datetime import datetime
from pathlib import Path

from loopx.collector import collector_paused
from loopx.errors import LoopxError
from loopx.forked import Forked
from loopx.hints import changes_file
from loopx.root import Layout
from loopx.status.cache import DEFAULT_FULL_SCAN_S, DEFAULT_TTL_S, LOCK_TIMEOUT_S, StatusCache
from loopx.status.document import status_bytes
from loopx.status.prefetch import Fingerprints
from loopx.status.refresh import RefreshReport, StatusIndex
from loopx.status.shards import remove_shards
from loopx.status.snapshot import FleetKey, remove_snapshot, write_snapshot
from loopx.status.sources import current_fleet_keyed
from loopx.status.view import StatusProjection
from loopx.storage.locks import locked

# One cache per root per process, so repeated calls (the supervisor's loop,
# the HTTP server) keep their memory instead of reloading every shard.
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
    return _load_keyed(
        layout, now=now, ttl_s=ttl_s, full_scan_after_s=full_scan_after_s, force=force
    )[0]


def _load_keyed(
    layout: Layout,
    *,
    now: datetime,
    ttl_s: float,
    full_scan_after_s: float,
    force: bool,
    prefetch: Forked[Fingerprints] | None = None,
) -> tuple[StatusProjection, FleetKey, StatusIndex]:
    cache = status_cache(layout)
    cache.refresh(
        now=now,
        ttl_s=ttl_s,
        full_scan_after_s=full_scan_after_s,
        force=force,
        prefetch=prefetch,
    )
    projection, index = cache.projection(), cache.index
    if projection is None or index is None:  # pragma: no cover - refresh always leaves an index
        msg = "status cache has no index after a refresh"
        raise LoopxError(msg)
    # The cache may be a few seconds old, written by a supervisor that has
    # stopped since: liveness is always read now (issue 16: no stale "running").
    fleet, key = current_fleet_keyed(layout, now=now)
    return projection.model_copy(update={"fleet": fleet}), key, index


def status_document(
    layout: Layout,
    *,
    now: datetime,
    ttl_s: float = DEFAULT_TTL_S,
    full_scan_after_s: float = DEFAULT_FULL_SCAN_S,
    prefetch: Forked[Fingerprints] | None = None,
) -> bytes:
    """``loopx status --json``'s bytes, assembled from the cache and kept as its snapshot.

    The snapshot (:mod:`loopx.status.snapshot`) lets the next warm CLI print
    the same bytes without loading the cache while nothing it shows changed.
    A refresh that scans every goal takes their fingerprints from ``prefetch``
    (:mod:`loopx.status.prefetch`; the caller closes it).
    """
    with collector_paused():
        projection, key, index = _load_keyed(
            layout,
            now=now,
            ttl_s=ttl_s,
            full_scan_after_s=full_scan_after_s,
            force=False,
            prefetch=prefetch,
        )
        document = status_bytes(projection)
    write_snapshot(
        layout, generation=index.generation, writer=index.writer, fleet=key, document=document
    )
    return document


def clear_status_cache(layout: Layout) -> None:
    """Delete the cached projection (index, shards, hints); the next refresh rebuilds it."""
    with locked(layout.status_file, timeout=LOCK_TIMEOUT_S):
        remove_snapshot(layout)
        for path in (layout.status_file, changes_file(layout)):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        remove_shards(layout)
    _CACHES.pop(layout.root, None)
