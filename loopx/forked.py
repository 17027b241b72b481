"""Work done by a forked child, its answer read back over a pipe.

A one-shot command with a large scan ahead (a cold ``loopx status --json``)
can hand part of it to the other core: the child starts with this process's
memory, so nothing needs sending to it, and writes back one encoded answer,
which the parent reads when it needs it. The child exits with ``os._exit``:
no Python teardown, no flush of buffers it inherited.

Only for a process with one thread (:func:`can_fork`): a fork copies the
calling thread alone, and a lock another thread held stays held in the child.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from typing import Generic, NoReturn, TypeVar

T = TypeVar("T")

_CHUNK = 1 << 20


def can_fork() -> bool:
    """Whether this process may fork a worker: POSIX, and no thread but this one."""
    if not hasattr(os, "fork"):  # pragma: no cover - POSIX only
        return False
    threading = sys.modules.get("threading")  # not imported: no other thread
    return threading is None or threading.active_count() == 1


class Forked(Generic[T]):
    """A child computing ``work()``; its owner calls :meth:`result` or :meth:`close`."""

    def __init__(self, pid: int, fd: int, loads: Callable[[bytes], T]) -> None:
        self.pid = pid  # the child's, until it is reaped by result() or close()
        self._fd = fd
        self._loads = loads
        self._open = True

    @classmethod
    def start(
        cls,
        work: Callable[[], T],
        *,
        dumps: Callable[[T], bytes],
        loads: Callable[[bytes], T],
    ) -> Forked[T]:
        """Fork a child that computes ``work()`` and writes ``dumps(answer)`` to a pipe."""
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read_end)
            _answer(work, dumps, write_end)
        os.close(write_end)
        return cls(pid, read_end, loads)

    def result(self) -> T | None:
        """Wait for the child's answer; None when it failed or was read already.

        A caller meeting None does the work itself: the child is a shortcut,
        never the only way to the answer.
        """
        if not self._open:
            return None
        self._open = False
        chunks: list[bytes] = []
        try:
            while chunk := os.read(self._fd, _CHUNK):
                chunks.append(chunk)
        finally:
            os.close(self._fd)
            _, status = os.waitpid(self.pid, 0)
        if os.waitstatus_to_exitcode(status) != 0:
            return None
        try:
            return self._loads(b"".join(chunks))
        except (EOFError, ValueError, TypeError):
            return None

    def close(self) -> None:
        """Stop the child unless its answer was read; idempotent."""
        if not self._open:
            return
        self._open = False
        os.close(self._fd)
        os.kill(self.pid, signal.SIGKILL)  # not reaped yet, so the pid is still the child's
        os.waitpid(self.pid, 0)


# Signals whose handlers (a supervisor's shutdown, its child reaper) are the parent's
# business: the child dies of them instead.
_DEFAULT_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP", "SIGCHLD", "SIGUSR1", "SIGUSR2")


def _answer(work: Callable[[], T], dumps: Callable[[T], bytes], fd: int) -> NoReturn:
    """The child: compute, write, and exit without Python's teardown."""
    code = 1
    try:
        for name in _DEFAULT_SIGNALS:
            signal.signal(getattr(signal, name), signal.SIG_DFL)
        data = memoryview(dumps(work()))
        while data:
            data = data[os.write(fd, data) :]
        code = 0
    finally:
        os._exit(code)
