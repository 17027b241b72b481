"""The supervisor's status duty: the projection refreshed on its cadence, and the notifications.

Each refresh hands the fresh projection to the notifications, which send from a background
thread; a supervisor that finds its predecessor died without a stop records that death
first, so the operator hears "down" and "recovered" once. Neither may stop the fleet: a
failed notification is a log line.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from loopx.errors import loop_fault
from loopx.fleet import ACTIVE_STATES, FleetRecord
from loopx.log import get_logger
from loopx.model import utcnow
from loopx.root import Layout
from loopx.supervisor.memory import TRIM_AFTER_REREAD, return_freed_memory

if TYPE_CHECKING:
    from loopx.notify.deliver import NotifyDuty

log = get_logger(__name__)

# The status refresh's scan of every goal's fingerprint (a stat per unchanged goal): every
# minute, or one goal per 1 / STATUS_SCAN_RATE s when that is longer (500 s at 100,000 goals),
# so an idle fleet's cost does not grow with the goals (hints make the scan a safety net).
STATUS_FULL_SCAN_S: Final = 60.0
STATUS_SCAN_RATE: Final = 200.0


class StatusDuty:
    """One root's status refresh and notifications, as the supervisor runs them."""

    def __init__(self, layout: Layout, *, ttl_s: float) -> None:
        self.layout = layout
        self.ttl_s = ttl_s
        self.goals: int | None = None  # goals in the last refresh (for STATUS=)
        self._notify: NotifyDuty | None = None  # notifications, sent off the main thread

    def refresh(self) -> None:
        """Refresh the status projection, then kick the notifications with it."""
        from loopx.status.current import refresh_status, status_cache  # noqa: PLC0415 - heavy
        from loopx.status.watch import FingerprintMemo  # noqa: PLC0415 - with the cache

        try:
            cache = status_cache(self.layout)
            if cache.memo is None:
                # The once-a-minute full scan costs a stat per unchanged goal.
                cache.memo = FingerprintMemo()
                cache.keep_views = False  # the rows hold them; it prints none
            scan_s = max(STATUS_FULL_SCAN_S, (self.goals or 0) / STATUS_SCAN_RATE)
            report = refresh_status(
                self.layout, now=utcnow(), ttl_s=self.ttl_s, full_scan_after_s=scan_s
            )
            self.goals = report.goals
            if report.reread >= TRIM_AFTER_REREAD:
                return_freed_memory()  # the views it replaced, freed between the live ones
        except Exception as e:
            if loop_fault(e) is not None:
                raise  # the refresh duty is degraded, said in the status line and record
            log.warning("status_refresh_failed", error=str(e))
            return
        self._kick_notifications()

    def previous_death(self, previous: FleetRecord | None, *, me: int) -> None:
        """A predecessor that died without a stop: its "down" and "recovered" notifications."""
        if previous is None or previous.state not in ACTIVE_STATES or previous.pid == me:
            return
        from loopx.notify.incident import record_restart  # noqa: PLC0415 - only after a death

        try:
            events = record_restart(
                self.layout, pid=previous.pid, last_heard=previous.updated_at, now=utcnow()
            )
        except Exception as e:  # noqa: BLE001 - notifications must never stop the fleet
            log.warning("notify_restart_failed", error=str(e))
            return
        if events:
            log.info("notify_previous_death", pid=previous.pid, events=len(events))

    def join(self, timeout_s: float) -> None:
        """Let a send in flight finish, at most ``timeout_s`` (the outbox resends it if not)."""
        if self._notify is not None:
            self._notify.join(timeout_s)

    def _kick_notifications(self) -> None:
        """Hand the fresh projection to the notifications, which send from a background thread."""
        from loopx.notify.deliver import NotifyDuty  # noqa: PLC0415 - only with notifications
        from loopx.status.current import current_status  # noqa: PLC0415 - heavy

        if not NotifyDuty.wanted(self.layout):
            return
        try:
            if self._notify is None:
                self._notify = NotifyDuty(self.layout)
            # Just refreshed: the cached projection answers without a scan.
            projection = current_status(self.layout, now=utcnow())
            self._notify.kick(projection, utcnow())
        except Exception as e:  # noqa: BLE001 - notifications must never stop the fleet
            log.warning("notify_duty_failed", error=str(e))
