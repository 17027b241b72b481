"""The running host's output, live: the last 16 KiB in ``projections/live/<goal>.json``, redacted.

The agent feeds every chunk its host writes (stdout and stderr, as a terminal
would show them); at most twice a second the tail is redacted and rewritten,
and the file is removed when the host ends. It is a view for the dashboard,
not a record: writes are best effort and never fail a turn, and the stored
output of a finished turn is its journal and run log.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Final, Literal

from loopx.errors import LoopxError
from loopx.model import Record, UtcDatetime, utcnow
from loopx.root import Layout
from loopx.secrets import redact_text
from loopx.storage.dirs import ensure_dir
from loopx.storage.files import atomic_write_model, parse_model, read_bytes

LIVE_DIR: Final = "live"
TAIL_BYTES: Final = 16 * 1024
FLUSH_EVERY_S: Final = 0.5


class LiveOutput(Record):
    """``projections/live/<goal>.json``: the tail of the output of the host running now."""

    schema_version: Literal[1] = 1
    goal_id: str
    turn_key: str
    updated_at: UtcDatetime
    text: str  # the newest output, secrets redacted, starting at a line boundary
    total_bytes: int  # everything the host wrote so far


def live_file(layout: Layout, goal_id: str) -> Path:
    """``projections/live/<goal>.json``."""
    return layout.projections_dir / LIVE_DIR / f"{goal_id}.json"


def read_live(layout: Layout, goal_id: str) -> LiveOutput | None:
    """The live tail of ``goal_id``'s running host, or None when none is running (or readable)."""
    path = live_file(layout, goal_id)
    try:
        return parse_model(path, LiveOutput, read_bytes(path))
    except (LoopxError, OSError):
        return None


class LiveTail:
    """Keeps a host's newest output in its live file while the host runs.

    Writes at most every FLUSH_EVERY_S; output that arrives sooner is written
    by a timer, so the last lines before a quiet spell still show.
    """

    def __init__(
        self,
        layout: Layout,
        goal_id: str,
        turn_key: str,
        secrets: Iterable[str],
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = live_file(layout, goal_id)
        self.goal_id = goal_id
        self.turn_key = turn_key
        self._secrets = list(secrets)
        self._clock = clock
        self._lock = threading.Lock()
        self._buf = bytearray()
        self._total = 0
        self._flushed_at = -FLUSH_EVERY_S
        self._timer: threading.Timer | None = None
        self._closed = False

    def feed(self, chunk: bytes) -> None:
        """Take one chunk of output; write the file now, or soon if it was just written."""
        with self._lock:
            self._buf += chunk
            self._total += len(chunk)
            if len(self._buf) > 2 * TAIL_BYTES:
                del self._buf[: len(self._buf) - TAIL_BYTES]
            if self._clock() - self._flushed_at >= FLUSH_EVERY_S:
                self._write()
            elif self._timer is None and not self._closed:
                self._timer = threading.Timer(FLUSH_EVERY_S, self._on_timer)
                self._timer.daemon = True
                self._timer.start()

    def flush(self) -> None:
        """Write the redacted tail now (best effort)."""
        with self._lock:
            self._write()

    def _on_timer(self) -> None:
        with self._lock:
            self._timer = None
            if not self._closed:
                self._write()

    def _write(self) -> None:
        self._flushed_at = self._clock()
        tail = bytes(self._buf[-TAIL_BYTES:])
        if self._total > len(tail):
            # Start at a line boundary, so no secret is shown cut in half at the top.
            tail = tail[tail.find(b"\n") + 1 :]
        text = redact_text(tail.decode("utf-8", errors="replace"), self._secrets)
        record = LiveOutput(
            goal_id=self.goal_id,
            turn_key=self.turn_key,
            updated_at=utcnow(),
            text=text,
            total_bytes=self._total,
        )
        with contextlib.suppress(OSError, LoopxError):
            ensure_dir(self.path.parent)
            atomic_write_model(self.path, record, durable=False, indent=None)

    def close(self) -> None:
        """The host ended: stop writing and remove the live file."""
        with self._lock:
            self._closed = True
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            with contextlib.suppress(OSError):
                os.unlink(self.path)
