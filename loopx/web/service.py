"""What the HTTP handlers read: the status cache, refreshed by one thread, and cached replies.

A background thread refreshes the cached projection every
``refresh_interval_s`` (a no-op while a supervisor keeps it fresh) and
publishes a change event when something changed; the serialised replies are
cached per generation, so a request costs a lookup and a socket write, not a
projection.

The refresher never dies: a refresh that fails for any
reason, a resource error above all (EMFILE, ENOMEM, ENOSPC, EIO), is recorded
as :attr:`StatusService.failure`, which turns ``/healthz`` unhealthy, and the
next tick tries again; the first refresh that succeeds clears it. The logger
is bound before the thread starts, because importing structlog is itself a
file operation that fails when descriptors are exhausted.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from loopx.errors import LoopxError
from loopx.faults import loop_fault_point
from loopx.log import get_logger
from loopx.model import utcnow
from loopx.registry.goalrecords import Goal
from loopx.root import Layout
from loopx.status.cache import StatusCache
from loopx.status.view import StatusProjection
from loopx.web.changefeed import ChangeFeed, change_event

if TYPE_CHECKING:
    from loopx.notify.deliver import NotifyDuty
    from loopx.web.actioncalls import ActionCalls

log = get_logger(__name__)
MAX_CACHED_REPLIES = 1024  # per generation: bounds what a crawler of query strings can pin


@dataclass(slots=True)
class Snapshot:
    """One generation of the projection, indexed by goal id, with its reply bodies."""

    generation: tuple[int, str]
    projection: StatusProjection
    by_id: dict[str, int]
    replies: dict[str, bytes] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RefreshFailure:
    """Why the last refresh failed, and since when refreshes have been failing."""

    error: str
    since: datetime


class StatusService:
    """The cache, its refresher thread and the change feed of one served root."""

    def __init__(
        self,
        layout: Layout,
        *,
        ttl_s: float,
        refresh_interval_s: float,
        actions: ActionCalls | None = None,
    ) -> None:
        self.layout = layout
        self.ttl_s = ttl_s
        self.refresh_interval_s = refresh_interval_s
        self.calls = actions  # the API's calls the actions make; None: a read-only server
        self.actions = actions is not None
        self.feed = ChangeFeed()
        self.failure: RefreshFailure | None = None
        self._cache = StatusCache(layout)
        self._lock = threading.Lock()
        self._snapshot: Snapshot | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._notify: NotifyDuty | None = None  # sends notifications when no supervisor runs
        self._log = log.bind(root=str(layout.root))  # binding imports structlog now, not mid-storm

    def refresh_once(self, *, now_please: bool = False) -> None:
        """Refresh the cache (if older than the TTL) and rebuild the snapshot if it changed.

        A refresh that changed goals (or the fleet) publishes a change event
        naming them; one that changed nothing keeps the assembled projection
        and only moves its ``checked_at``, so an idle root costs no re-sort.
        ``now_please`` ignores the TTL (after an action, so the page sees it).
        """
        with self._lock:
            ttl_s = 0.0 if now_please else self.ttl_s
            report = self._cache.refresh(now=utcnow(), ttl_s=ttl_s)
            index = self._cache.index
            if index is None:
                return
            generation = (index.generation, index.writer)
            old = self._snapshot
            if old is not None and old.generation == generation:
                return
            if (
                old is not None
                and report.changed == frozenset()
                and index.fleet == old.projection.fleet
                and index.generated_at == old.projection.generated_at
            ):
                moved = old.projection.model_copy(update={"checked_at": index.checked_at})
                self._snapshot = Snapshot(generation, moved, old.by_id)
                return
            projection = self._cache.projection()
            if projection is None:
                return
            by_id = {g.goal_id: i for i, g in enumerate(projection.goals)}
            self._snapshot = Snapshot(generation, projection, by_id)
            if old is not None:
                self.feed.publish(
                    change_event(
                        self.feed.next_seq(),
                        at=index.checked_at,
                        changed=report.changed,
                        counts=projection.counts,
                        fleet=projection.fleet,
                    )
                )

    def tick(self) -> None:
        """One refresh; a failure is recorded (and logged once), never raised."""
        try:
            loop_fault_point("serve:refresh")
            self.refresh_once()
        except Exception as e:  # noqa: BLE001 - the refresher must outlive any one failure
            error = f"{type(e).__name__}: {e}"
            if self.failure is None:
                self.failure = RefreshFailure(error, utcnow())
                self._log_safely("status_refresh_failed", error)
            elif self.failure.error != error:
                self.failure = RefreshFailure(error, self.failure.since)
            return
        if self.failure is not None:
            self._log_safely("status_refresh_recovered", self.failure.error)
            self.failure = None

    def tick_now(self) -> None:
        """Refresh ignoring the TTL (after an action, so the page sees it); never raises."""
        try:
            self.refresh_once(now_please=True)
        except Exception:  # noqa: BLE001 - the refresher's next tick records a lasting failure
            return

    def _log_safely(self, event: str, error: str) -> None:
        # A full disk or no descriptors can refuse the log line too; /healthz carries the record.
        with contextlib.suppress(Exception):
            self._log.warning(event, error=error)

    def goal_policy(self, goal_id: str) -> Goal | None:
        """The registry entry the cache last read for ``goal_id``."""
        with self._lock:
            return self._cache.active.get(goal_id)

    def snapshot(self) -> Snapshot:
        """The current snapshot (refreshing first if there is none).

        Raises:
            LoopxError: there is none and the first refresh failed.

        """
        snap = self._snapshot
        if snap is None:
            self.refresh_once()
            snap = self._snapshot
        if snap is None:  # pragma: no cover - refresh_once always builds one
            msg = "no status snapshot"
            raise LoopxError(msg)
        return snap

    def with_cache(self, use: Callable[[StatusCache], str]) -> str:
        """Run ``use`` over the cache while the refresher cannot change it."""
        with self._lock:
            return use(self._cache)

    def start(self) -> None:
        """Build the first snapshot and start the background refresher."""
        self.refresh_once()
        self._thread = threading.Thread(target=self._loop, name="status-refresh", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the background refresher and end every event stream. Idempotent."""
        self._stop.set()
        self.feed.close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _loop(self) -> None:
        while not self._stop.wait(self.refresh_interval_s):
            self.tick()
            self.notify_tick()

    def notify_tick(self) -> None:
        """Send the notifications when no supervisor does (it sends them while it runs); never raises."""
        from loopx.notify.deliver import NotifyDuty, supervisor_alive  # noqa: PLC0415 - rare

        try:
            snap = self._snapshot
            if snap is None or not NotifyDuty.wanted(self.layout) or supervisor_alive(self.layout):
                return
            if self._notify is None:
                self._notify = NotifyDuty(self.layout)
            self._notify.kick(snap.projection, utcnow())
        except Exception as e:  # noqa: BLE001 - notifications must never stop the server
            self._log_safely("notify_duty_failed", f"{type(e).__name__}: {e}")

    def cached(self, key: str, build: Callable[[Snapshot], bytes]) -> bytes:
        """A reply body cached per snapshot generation."""
        snap = self.snapshot()
        body = snap.replies.get(key)
        if body is None:
            body = build(snap)
            if len(snap.replies) < MAX_CACHED_REPLIES:
                snap.replies[key] = body
        return body
