"""A forked child doing one piece of a command's work on the other core; standard library only.

Two places use it, both in a cold ``loopx status --json``: the goals'
fingerprints taken while the parent imports (:mod:`loopx.status.prefetch`)
and a rebuilt status database written while the parent assembles the
document (:mod:`loopx.status.database`). Either is a shortcut: where this
process may not fork, or the child fails, the parent does the work itself.
"""

from __future__ import annotations

import os
import signal
import sys

TYPE_CHECKING = False  # not `typing`: imported before the heavy modules
if TYPE_CHECKING:
    from collections.abc import Callable

# The parent's handlers (a supervisor's shutdown, a child reaper) are not the child's: it
# dies of these signals instead.
_DEFAULT_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP", "SIGCHLD", "SIGUSR1", "SIGUSR2")


def can_fork() -> bool:
    """POSIX, and no thread but this one: a fork copies the calling thread alone."""
    threading = sys.modules.get("threading")  # not imported: no other thread
    return hasattr(os, "fork") and (threading is None or threading.active_count() == 1)


def fork(work: Callable[[], None]) -> int | None:
    """Run ``work`` in a forked child; its pid, or None where this process may not fork.

    The child exits 0 when ``work`` returns, 1 when it raises, without
    Python's teardown (no ``atexit``, no flush of buffers it inherited).
    Reap it with ``os.waitpid``.
    """
    if not can_fork():
        return None
    try:
        pid = os.fork()
    except OSError:  # no process left (EAGAIN, ENOMEM): the parent does it itself
        return None
    if pid == 0:  # pragma: no cover - the child's side; its exit code is what tests read
        code = 1
        try:
            for name in _DEFAULT_SIGNALS:
                signal.signal(getattr(signal, name), signal.SIG_DFL)
            work()
            code = 0
        finally:
            os._exit(code)
    return pid


def exited_ok(pid: int) -> bool:
    """Reap child ``pid``; whether it exited 0."""
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 0
