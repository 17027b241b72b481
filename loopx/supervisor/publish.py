"""``supervisor.json`` published: a refused write degrades the supervisor, never ends it.

A write refused for a resource (disk full, no descriptor, no memory) marks the supervisor
degraded and is tried again with backoff; the first write that passes clears it. A write
the path refuses because the root moved away (gone, a symlink above it now) goes through
the directory the supervisor opened, so the fleet's end is recorded where the root went.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from loopx.errors import LoopxError, loop_fault
from loopx.fleet import FleetRecord
from loopx.log import get_logger
from loopx.root import Layout
from loopx.root.held import RootHandle
from loopx.storage.files import atomic_write_model
from loopx.storage.resources import retry_delay

log = get_logger(__name__)


class RecordPublisher:
    """Writes one root's ``supervisor.json`` and keeps what a refused write left to do."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        # Why writes are refused now (disk full...), None when healthy; the supervisor
        # keeps going and retries the record with backoff.
        self.degraded: str | None = None
        self.failures = 0
        self.retry_at: float | None = None  # monotonic time of the next try, after a refusal

    def publish(
        self, record: FleetRecord, *, root_moved: Callable[[], bool], root: RootHandle | None
    ) -> None:
        """Write ``record``; ``root_moved`` says (and acts on) whether the root moved away.

        Raises:
            OSError, LoopxError: a refusal that is neither a resource fault nor a moved root.
        """
        try:
            atomic_write_model(self.layout.supervisor_file, record)
        except (OSError, MemoryError, LoopxError) as e:
            reason = loop_fault(e) if isinstance(e, OSError | MemoryError) else None
            if reason is None:
                if root_moved():
                    # The path refuses the write: the record goes where the note went.
                    self._write_through(root, record)
                    return
                raise
            self.failures += 1
            delay = retry_delay(self.failures)
            self.retry_at = time.monotonic() + delay
            if self.degraded != reason:
                log.warning("supervisor_degraded", reason=reason, retry_in_s=delay)
            self.degraded = reason
            return
        if self.degraded is not None:
            log.info("supervisor_recovered", was=self.degraded, failures=self.failures)
        self.degraded, self.failures, self.retry_at = None, 0, None

    def _write_through(self, root: RootHandle | None, record: FleetRecord) -> None:
        """Write ``supervisor.json`` through the root's descriptor, so its end is recorded."""
        if root is None:
            return
        data = record.model_dump_json(indent=2).encode() + b"\n"
        try:
            root.write_file(self.layout.supervisor_file.name, data)
        except OSError as e:
            log.warning("root_moved_record_failed", error=str(e))
