"""Process identity and control: who a process is, whether it lives, how to end its tree.

A process is identified by its pid *and* its psutil ``create_time()``
(:class:`ProcessIdentity`), so a recycled pid is never mistaken for the
process a file recorded. Alive means: that pid, that start time, and not a
zombie. Ending a tree is SIGTERM, a grace period, then SIGKILL, and waiting
until every process is gone (a zombie counts as gone: only its parent can
reap it). Processes that ``setsid`` away from their group are found by the
``LOOPX_*`` variables they inherited (:func:`find_by_env`).

Also here, because agents and the supervisor both need them: the Linux
``prctl`` switches (parent-death signal, child subreaper) and the signal
mask a spawning supervisor hands down.

Each helper does one OS-level thing; the policy (when to kill, how long a
grace) belongs to the caller. The package also holds :mod:`~loopx.process.pids`
(whether any process holds a pid, without psutil) and
:mod:`~loopx.process.collector` (the cyclic collector paused during a burst).
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from types import FrameType
from typing import TYPE_CHECKING, Any, Final

from loopx import environ
from loopx.process.pids import pid_held

# psutil and ctypes are imported where they are used: a cold `loopx status` asks only
# whether a few recorded pids still run, which a dead pid answers without psutil
# (whose import costs more than the rest of that question).
if TYPE_CHECKING:
    import ctypes

    import psutil

# Two reads of one process's create_time() can differ: psutil adds the boot
# time (/proc/stat btime, whole seconds, moved by clock adjustments) to the
# start tick, and different processes read it at different times. A recycled
# pid starts later by the time it took to cycle through the pid space.
START_TOLERANCE_S: Final = 1.0
# How long SIGKILLed processes get to disappear (one stuck in uninterruptible
# sleep may take longer; it is returned to the caller).
KILL_WAIT_S: Final = 5.0
_POLL_S: Final = 0.01
# Linux prctl options (include/uapi/linux/prctl.h).
PR_SET_PDEATHSIG: Final = 1
PR_SET_CHILD_SUBREAPER: Final = 36
PR_GET_CHILD_SUBREAPER: Final = 37
HANDLED_SIGNALS: Final = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


@dataclass(frozen=True, slots=True)
class ProcessIdentity:
    """A process named by pid and start time (psutil ``create_time()``)."""

    pid: int
    started_at: float

    @classmethod
    def current(cls) -> ProcessIdentity:
        """The calling process."""
        import psutil  # noqa: PLC0415 - see the imports above

        return cls(os.getpid(), psutil.Process().create_time())

    @classmethod
    def of(cls, pid: int) -> ProcessIdentity | None:
        """The process holding ``pid`` now, or None when there is none."""
        started = started_at(pid)
        return None if started is None else cls(pid, started)

    def find(self) -> psutil.Process | None:
        """The live process this names, or None (gone, zombie, or pid reused)."""
        if not pid_held(self.pid):
            return None
        import psutil  # noqa: PLC0415 - see the imports above

        try:
            proc = psutil.Process(self.pid)
            if abs(proc.create_time() - self.started_at) > START_TOLERANCE_S:
                return None
            if proc.status() == psutil.STATUS_ZOMBIE:
                return None
        except psutil.Error:
            return None
        return proc

    def alive(self) -> bool:
        """Whether this very process still runs (not a zombie, not a recycled pid)."""
        return self.find() is not None


def started_at(pid: int) -> float | None:
    """The psutil ``create_time()`` of ``pid``, or None when it is gone."""
    import psutil  # noqa: PLC0415 - see the imports above

    try:
        return float(psutil.Process(pid).create_time())
    except psutil.Error:
        return None


def running(proc: psutil.Process) -> bool:
    """Whether ``proc`` (already identified) still runs: neither gone nor a zombie."""
    import psutil  # noqa: PLC0415 - see the imports above

    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def child_running(pid: int) -> bool:
    """Whether our child ``pid`` has not exited yet; never reaps it (``WNOWAIT``)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None
    except ChildProcessError:
        return False


def tree(proc: psutil.Process) -> list[psutil.Process]:
    """``proc`` and all its live descendants, parents first."""
    import psutil  # noqa: PLC0415 - see the imports above

    try:
        return [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return []


def find_by_env(loopx_root: str, marks: Mapping[str, str | None]) -> list[psutil.Process]:
    """Processes (other than this one) whose environment names ``loopx_root`` and ``marks``.

    Args:
        loopx_root: the value ``LOOPX_ROOT`` must have.
        marks: more variables the environment must have: name -> value, or
            name -> None for "set, any value".

    Reading every process's environment is slow (milliseconds), so callers
    scan only when they must find escaped descendants.
    """
    import psutil  # noqa: PLC0415 - see the imports above

    me = os.getpid()
    found = []
    for proc in psutil.process_iter():
        if proc.pid == me:
            continue
        try:
            env = proc.environ()
        except (psutil.Error, OSError):
            continue
        if env.get(environ.ROOT) != loopx_root:
            continue
        if all(
            name in env if value is None else env.get(name) == value
            for name, value in marks.items()
        ):
            found.append(proc)
    return found


def signal_all(procs: Iterable[psutil.Process], signum: int) -> None:
    """Send ``signum`` to each process, ignoring those already gone."""
    import psutil  # noqa: PLC0415 - see the imports above

    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.send_signal(signum)


def wait_gone(
    procs: Iterable[psutil.Process], *, timeout_s: float, child_pid: int | None = None
) -> list[psutil.Process]:
    """Wait until ``procs`` (and our child ``child_pid``) are gone or zombies, or ``timeout_s``.

    The child is watched without being reaped, so its caller can still
    ``wait4`` it for its rusage.

    Returns:
        The processes of ``procs`` still running.

    """
    deadline = time.monotonic() + timeout_s
    alive = list(procs)
    while True:
        alive = [p for p in alive if running(p)]
        child_alive = child_pid is not None and child_running(child_pid)
        if (not alive and not child_alive) or time.monotonic() >= deadline:
            return alive
        time.sleep(_POLL_S)


def kill_tree(
    procs: Iterable[psutil.Process],
    *,
    grace_s: float,
    pgid: int | None = None,
    child_pid: int | None = None,
) -> list[psutil.Process]:
    """SIGTERM everything, SIGKILL what is left after ``grace_s``, wait until it is gone.

    Args:
        procs: the processes of the tree, including descendants the caller
            found by :func:`find_by_env` (they may have left the group).
        grace_s: how long SIGTERM gets before SIGKILL (0: SIGKILL at once after it).
        pgid: a process group to signal as well (the tree's session leader);
            only ``procs`` and ``child_pid`` are waited for, so pass the group's
            members found by :func:`tree` or :func:`find_by_env` too.
        child_pid: our own child to signal as well; never reaped here, so its
            caller can ``wait4`` it for its rusage.

    Returns:
        The processes that survived even SIGKILL (should be empty; a process
        stuck in uninterruptible sleep may linger).

    """
    targets = [p for p in procs if p.pid != child_pid]
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, KILL_WAIT_S)):
        if pgid is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, sig)
        if child_pid is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(child_pid, sig)
        signal_all(targets, sig)
        targets = wait_gone(targets, timeout_s=wait_s, child_pid=child_pid)
        if not targets and not (child_pid is not None and child_running(child_pid)):
            return []
    return targets


# --- process-wide switches ----------------------------------------------------------------------


@functools.cache
def _libc() -> ctypes.CDLL | None:
    """The C library, as dlopen(NULL): no ``ldconfig`` run (it is called after a fork)."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes  # noqa: PLC0415 - see the imports above

    return ctypes.CDLL(None, use_errno=True)


def _prctl(option: int, value: int) -> bool:
    libc = _libc()
    if libc is None:
        return False
    return int(libc.prctl(option, value, 0, 0, 0)) == 0


def set_parent_death_signal(signum: int = signal.SIGTERM) -> bool:
    """Ask Linux to send ``signum`` to this process when its parent dies (``PR_SET_PDEATHSIG``).

    Returns:
        True where the OS supports it (Linux), False elsewhere.

    """
    return _prctl(PR_SET_PDEATHSIG, int(signum))


def become_subreaper() -> bool:
    """Make orphaned descendants (hosts that double-fork) reparent to this process.

    Then ``psutil.Process().children(recursive=True)`` sees the whole tree and
    nothing escapes to init while this process lives.
    """
    return _prctl(PR_SET_CHILD_SUBREAPER, 1)


def is_subreaper() -> bool | None:
    """Whether this process is a child subreaper now; None where that cannot be asked."""
    import ctypes  # noqa: PLC0415 - see the imports above

    libc = _libc()
    value = ctypes.c_int(0)
    if libc is None or libc.prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(value), 0, 0, 0) != 0:
        return None
    return value.value != 0


@contextlib.contextmanager
def subreaper() -> Iterator[bool]:
    """Be a child subreaper inside the block (restored after); yields whether it took effect.

    For a bounded time only (an agent while its host runs): outside it, unrelated
    daemons whose parent dies (a test process starting detached supervisors) must
    keep going to init, or they would linger as our unreaped zombies.
    """
    before = is_subreaper()
    enabled = before is not None and (before or become_subreaper())
    try:
        yield enabled
    finally:
        if enabled and before is False:
            _prctl(PR_SET_CHILD_SUBREAPER, 0)


@contextlib.contextmanager
def signals_blocked(signals: Iterable[int] = HANDLED_SIGNALS) -> Iterator[None]:
    """Block ``signals`` in this thread: a handler never runs half-way through a spawn.

    A child inherits the blocked mask across exec, so every program spawned
    this way must unblock them at start (:func:`unblock_handled_signals`).
    """
    wanted = set(signals)
    old = signal.pthread_sigmask(signal.SIG_BLOCK, wanted)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def own_sigint(
    handler: Callable[[int, FrameType | None], Any],
) -> Callable[[int, FrameType | None], Any] | int | None:
    """Install ``handler`` for SIGINT; a Ctrl-C that came before and was lost is handed to it now.

    The CLI's first handler notes every Ctrl-C (``interrupted``) besides raising
    KeyboardInterrupt, which CPython drops when it lands in a weakref callback or
    a finalizer. Returns the previous handler, for the caller to restore.
    """
    previous = signal.signal(signal.SIGINT, handler)
    if getattr(previous, "interrupted", False):
        previous.interrupted = False  # type: ignore[union-attr] # handed over once
        handler(signal.SIGINT, None)
    return previous


def unblock_handled_signals() -> None:
    """Undo the mask a spawning parent passed down (see :func:`signals_blocked`)."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, set(HANDLED_SIGNALS))
