"""Live change events for the dashboard: what a status refresh changed, fanned out to streams.

The HTTP server's refresher publishes one :class:`ChangeEvent` per refresh
that changed something (the goals its change hints and fingerprints led it to
re-project, or the fleet); each ``/events`` stream waits on the
:class:`ChangeFeed` and sends the events as Server-Sent Events. A client
then fetches only what it shows (a page, one goal), never the whole
projection.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import deque
from collections.abc import Iterable
from typing import Final, Literal

from pydantic import Field

from loopx.model import Record, UtcDatetime
from loopx.status.view import FleetView, StatusCounts

MAX_CHANGED_IDS: Final = 200  # past this an event says "many" and clients refetch their view
_BACKLOG: Final = 256  # events kept for a stream that fell behind


class ChangeEvent(Record):
    """One ``change`` event of ``/events``: which goals changed, and the new totals."""

    schema_version: Literal[1] = 1
    seq: int  # raised by one per event of this server process
    at: UtcDatetime
    changed: list[str] = Field(default_factory=list)  # goal ids, at most MAX_CHANGED_IDS
    all: bool = False  # the change set is unknown or larger than ``changed``: refetch what you show
    counts: StatusCounts
    fleet: FleetView


def change_event(
    seq: int,
    *,
    at: UtcDatetime,
    changed: Iterable[str] | None,
    counts: StatusCounts,
    fleet: FleetView,
) -> ChangeEvent:
    """The event for one refresh; ``changed`` None means "unknown". Pure."""
    ids = sorted(changed) if changed is not None else []
    return ChangeEvent(
        seq=seq,
        at=at,
        changed=ids[:MAX_CHANGED_IDS],
        all=changed is None or len(ids) > MAX_CHANGED_IDS,
        counts=counts,
        fleet=fleet,
    )


class StreamSlots:
    """How many event streams may be open at once, and how many are.

    Each stream holds a descriptor for as long as it lives; the cap keeps
    them below the process's descriptor limit, so that ``/healthz``,
    ``/status`` and the refresher's file reads always find one. Used from the
    server's event loop only.
    """

    def __init__(self, cap: int) -> None:
        self.cap = max(cap, 0)
        self.open = 0

    def take(self) -> bool:
        """Take a slot for a new stream; False when every slot is taken."""
        if self.open >= self.cap:
            return False
        self.open += 1
        return True

    def release(self) -> None:
        """Give back the slot of a stream that ended."""
        self.open = max(self.open - 1, 0)


class ChangeFeed:
    """A bounded backlog of events that any number of streams of one event loop wait on.

    Published from any thread (the refresher, an action's handler); waited on
    by the server's event loop, which :meth:`attach` names, so that 500 open
    streams cost 500 coroutines, not 500 threads.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._events: deque[ChangeEvent] = deque(maxlen=_BACKLOG)
        self._seq = 0
        self._closed = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None

    @property
    def seq(self) -> int:
        """The newest event's sequence number (0 before any)."""
        return self._seq

    @property
    def closed(self) -> bool:
        """Whether the server is shutting down."""
        return self._closed

    def next_seq(self) -> int:
        """The sequence number the next published event must carry."""
        return self._seq + 1

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """Wake waiters on ``loop`` (call from inside it, before the first stream)."""
        self._loop = loop
        self._wake = asyncio.Event()

    def publish(self, event: ChangeEvent) -> None:
        """Add ``event`` and wake every waiting stream."""
        with self._lock:
            self._events.append(event)
            self._seq = event.seq
        self._pulse_threadsafe()

    def close(self) -> None:
        """Wake every stream so it ends (server shutdown)."""
        self._closed = True
        self._pulse_threadsafe()

    def _pulse_threadsafe(self) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody waits
                loop.call_soon_threadsafe(self._pulse)

    def _pulse(self) -> None:
        wake, self._wake = self._wake, asyncio.Event()
        if wake is not None:
            wake.set()

    def after(self, seq: int) -> list[ChangeEvent]:
        """The kept events newer than ``seq``, oldest first.

        A stream that fell further behind than the backlog gets the oldest
        kept events; each carries ``counts``, and the gap shows as a jump in
        ``seq`` that tells the client to refetch what it shows.
        """
        with self._lock:
            return [e for e in self._events if e.seq > seq]

    async def wait_after(self, seq: int, timeout: float) -> list[ChangeEvent]:  # noqa: ASYNC109 - bounded by the stream's keep-alive
        """Events newer than ``seq``, waiting up to ``timeout`` seconds for one (or the close)."""
        wake = self._wake
        events = self.after(seq)
        if events or self._closed or wake is None:
            return events
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await wake.wait()
        return self.after(seq)
