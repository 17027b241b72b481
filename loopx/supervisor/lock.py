"""One supervisor per root: a non-blocking lock on ``supervisor.lock``."""

from __future__ import annotations

import filelock

from loopx.errors import CorruptFileError, LoopxError
from loopx.fleet import FleetRecord
from loopx.root import Layout
from loopx.storage.files import FILE_MODE, read_model_or_none


class SupervisorRunningError(LoopxError):
    """Another supervisor holds this root's ``supervisor.lock``."""

    def __init__(self, root: str, pid: int | None) -> None:
        who = f"pid {pid}" if pid is not None else "a process whose pid is not recorded yet"
        super().__init__(
            f"another supervisor ({who}) is already running on {root}",
            hint="see it with `loopx supervisor status`; stop it with `loopx supervisor stop`",
        )
        self.root = root
        self.pid = pid


def read_record(layout: Layout) -> FleetRecord | None:
    """``supervisor.json``, or None when absent or unreadable (a damaged record is only a report)."""
    try:
        return read_model_or_none(layout.supervisor_file, FleetRecord)
    except CorruptFileError:
        return None


def acquire(layout: Layout) -> filelock.BaseFileLock:
    """Take ``supervisor.lock`` without waiting.

    The lock is an ``flock``: the kernel drops it when the holder dies, even by
    SIGKILL, so a crashed supervisor never blocks the next one. Not inherited
    by agents (Python opens fds non-inheritable, PEP 446).

    Raises:
        SupervisorRunningError: another supervisor holds it (its pid read from ``supervisor.json``).

    """
    lock = filelock.FileLock(str(layout.supervisor_lock), mode=FILE_MODE, is_singleton=False)
    try:
        lock.acquire(timeout=0)
    except filelock.Timeout:
        record = read_record(layout)
        raise SupervisorRunningError(str(layout.root), record.pid if record else None) from None
    return lock
