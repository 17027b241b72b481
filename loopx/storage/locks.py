"""File locks: ``<file>.lock`` held for a read-modify-write of a shared file.

``flock`` of ``<file>.lock`` (the lock ``filelock.FileLock`` takes, without
its per-call cost); a busy lock is retried with jittered backoff (tenacity)
and ends in :class:`~loopx.errors.LockTimeoutError`. On a network filesystem
(or with ``LOOPX_LOCK_MODE=soft``) the lock is a soft lock
(:mod:`loopx.storage.softlock`) instead. Never hold a lock while a host runs.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Final

from loopx.errors import LockTimeoutError, UnsafePathError
from loopx.storage.dirs import refuse_symlink, refuse_symlinked_parents
from loopx.storage.files import FILE_MODE
from loopx.storage.softlock import LockMode, SoftLock, lock_mode_for

# filelock is imported only when a lock is busy (its ``Timeout``) or flock is missing: its
# import costs more than a command that takes one free lock, such as a cold `loopx status`.
if TYPE_CHECKING:
    import filelock

DEFAULT_LOCK_TIMEOUT_S: Final = 30.0


def lock_path_for(path: Path) -> Path:
    """The lock file guarding ``path``."""
    return path.with_name(path.name + ".lock")


@contextlib.contextmanager
def locked(path: Path, *, timeout: float = DEFAULT_LOCK_TIMEOUT_S) -> Iterator[None]:
    """Hold the file lock of ``path`` (``<path>.lock``) for a read-modify-write.

    Never hold it while a host runs. Not reentrant: do not nest two locks of
    the same file in one process.

    Raises:
        LockTimeoutError: the lock stayed busy for ``timeout`` seconds.
    """
    lock_file = lock_path_for(path)
    # A root on a network filesystem (or LOOPX_LOCK_MODE=soft) uses soft locks: see loopx.storage.softlock.
    soft = lock_mode_for(lock_file) is LockMode.SOFT
    if soft:
        refuse_symlink(lock_file)
    else:  # the lock file itself is opened with O_NOFOLLOW (_Flock.acquire)
        refuse_symlinked_parents(lock_file)
    lock: filelock.FileLock | SoftLock | _Flock = SoftLock(lock_file) if soft else _Flock(lock_file)
    try:
        lock.acquire(timeout=0)  # the common case, a free lock: no retry machinery
    except _busy():  # evaluated only when acquire raised
        _acquire_with_retries(lock, lock_file, timeout)
    try:
        yield
    finally:
        lock.release()


def _busy() -> type[filelock.Timeout]:
    """``filelock.Timeout``: what a busy lock raises (imported then, see the imports above)."""
    import filelock  # noqa: PLC0415 - see the imports above

    return filelock.Timeout


class _Flock:
    """The lock ``filelock.FileLock`` takes on Unix (``flock`` of ``<file>.lock``), minus its cost.

    Same file, mode and ``flock(LOCK_EX | LOCK_NB)``, so it excludes and is
    excluded by a ``filelock.FileLock`` on the same path; what it leaves out
    is filelock's per-call bookkeeping (singletons, fork tracking, thread
    state), which cost more than the lock on every turn (7 locks a turn).
    A lock file unlinked by a peer between our open and our flock is not
    trusted (retried), as filelock does. A filesystem without ``flock``
    falls back to ``filelock.FileLock`` itself.
    """

    def __init__(self, lock_file: Path) -> None:
        self._path = lock_file
        self._fd: int | None = None
        self._fallback: filelock.FileLock | None = None

    def acquire(self, timeout: float = 0) -> None:  # noqa: ARG002 - callers retry (tenacity)
        """Take the lock now or raise ``filelock.Timeout``."""
        if self._fallback is not None:
            self._fallback.acquire(timeout=0)
            return
        try:
            fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, FILE_MODE)
        except OSError as e:
            if e.errno == errno.ELOOP:  # O_NOFOLLOW met a symlink
                raise UnsafePathError(self._path, "it is a symlink") from e
            raise
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise _busy()(str(self._path)) from None
        except OSError:  # no flock here (ENOSYS, ENOLCK...): let filelock decide
            os.close(fd)
            import filelock  # noqa: PLC0415 - see the imports above

            self._fallback = filelock.FileLock(str(self._path), mode=FILE_MODE, is_singleton=False)
            self._fallback.acquire(timeout=0)
            return
        if os.fstat(fd).st_nlink == 0:  # unlinked under us: a lock nobody else can see
            os.close(fd)
            raise _busy()(str(self._path))
        self._fd = fd

    def release(self) -> None:
        """Let the lock go."""
        if self._fallback is not None:
            self._fallback.release()
            return
        fd, self._fd = self._fd, None
        if fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)


def lock_busy(path: Path) -> bool:
    """Whether another holder has the file lock of ``path`` right now. A hint only.

    The answer may change the moment it is given; callers use it to try other
    work first, never to decide anything that needs the lock. A soft lock
    (network filesystems) is never reported busy.
    """
    lock_file = lock_path_for(path)
    if lock_mode_for(lock_file) is LockMode.SOFT:
        return False
    try:
        fd = os.open(lock_file, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return False  # no lock file yet (or unreadable): let the real acquire decide
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the same flock filelock takes
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)  # releases the probe's flock, if it got one
    return False


def _acquire_with_retries(
    lock: filelock.FileLock | SoftLock | _Flock, lock_file: Path, timeout: float
) -> None:
    """Retry a busy lock with jittered backoff until ``timeout``."""
    # Imported here: most locks are free at the first try, and a command should not pay for it.
    from tenacity import (  # noqa: PLC0415
        Retrying,
        retry_if_exception_type,
        stop_after_delay,
        wait_random_exponential,
    )

    try:
        for attempt in Retrying(
            stop=stop_after_delay(timeout),
            wait=wait_random_exponential(multiplier=0.005, max=0.25),
            retry=retry_if_exception_type(_busy()),
            reraise=True,
        ):
            with attempt:
                lock.acquire(timeout=0)
    except _busy() as e:
        raise LockTimeoutError(lock_file, timeout) from e
