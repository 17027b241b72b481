"""OS-level process helpers: spawn a session leader, identify, find, kill and reap processes.

Each helper does one thing; the policy (when to kill, how long to wait) lives
in :mod:`loopx.supervisor.fleet`. A process is identified by its pid *and*
its psutil ``create_time()``, so a recycled pid is never mistaken for an old
agent.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Final

import psutil

# create_time() is derived from clock ticks since boot; two reads of one process agree
# within a tick, two processes sharing a pid differ by far more.
START_TOLERANCE_S: Final = 0.05
ROOT_ENV: Final = "LOOPX_ROOT"
AGENT_ENV: Final = "LOOPX_AGENT_ID"
# Linux prctl options (include/uapi/linux/prctl.h).
PR_SET_PDEATHSIG: Final = 1
PR_SET_CHILD_SUBREAPER: Final = 36
HANDLED_SIGNALS: Final = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


@dataclass(frozen=True, slots=True)
class ProcessRef:
    """A process named by pid and start time."""

    pid: int
    started_at: float

    def alive(self) -> bool:
        """Whether this very process still runs (not a zombie, not a recycled pid)."""
        return find(self) is not None


def started_at(pid: int) -> float | None:
    """The psutil ``create_time()`` of ``pid``, or None when it is gone."""
    try:
        return float(psutil.Process(pid).create_time())
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


def find(ref: ProcessRef) -> psutil.Process | None:
    """The live process ``ref`` names, or None (gone, zombie, or pid reused)."""
    try:
        proc = psutil.Process(ref.pid)
        if abs(proc.create_time() - ref.started_at) > START_TOLERANCE_S:
            return None
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None
    return proc


def self_ref() -> ProcessRef:
    """This process."""
    return ProcessRef(os.getpid(), psutil.Process().create_time())


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    return ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


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

    Then ``psutil.Process().children(recursive=True)`` sees the whole fleet and
    nothing escapes to init while the supervisor lives.
    """
    return _prctl(PR_SET_CHILD_SUBREAPER, 1)


@contextlib.contextmanager
def signals_blocked(signals: Iterable[int] = HANDLED_SIGNALS) -> Iterator[None]:
    """Block ``signals`` in this thread: a handler never runs half-way through a spawn.

    A child inherits the blocked mask across exec, so every program spawned
    here must unblock them at start (the agent does, in ``loopx.agents``).
    """
    wanted = set(signals)
    old = signal.pthread_sigmask(signal.SIG_BLOCK, wanted)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def unblock_handled_signals() -> None:
    """Undo the mask a spawning supervisor passed down (see :func:`signals_blocked`)."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, set(HANDLED_SIGNALS))


def spawn(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    log_path: Path | None,
    cwd: Path | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``argv`` as the leader of a new session, stdout and stderr to ``log_path``.

    The handled signals stay blocked during the fork so the supervisor's
    handlers never run in a half-made child.
    """
    out: IO[bytes] | int = subprocess.DEVNULL
    if log_path is not None:
        fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
        out = os.fdopen(fd, "ab", buffering=0)
    try:
        with signals_blocked():
            return subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=dict(env),
                cwd=cwd,
                start_new_session=True,
                close_fds=True,
            )
    finally:
        if not isinstance(out, int):
            out.close()


def tree(proc: psutil.Process) -> list[psutil.Process]:
    """``proc`` and all its live descendants, parents first."""
    try:
        return [proc, *proc.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def fleet_processes(root: Path, *, agent_id: str | None = None) -> list[psutil.Process]:
    """Processes started for this root's fleet: their environment names the root and an agent.

    Agents are spawned with ``LOOPX_ROOT`` and ``LOOPX_AGENT_ID``; their hosts
    inherit both, so a host that ``setsid``-ed or double-forked away from the
    agent's tree is still found. A person's shell that merely exports
    ``LOOPX_ROOT`` carries no agent id and is never touched.
    """
    me = os.getpid()
    wanted_root = str(root)
    found = []
    for proc in psutil.process_iter():
        if proc.pid == me:
            continue
        try:
            env = proc.environ()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            continue
        if env.get(ROOT_ENV) != wanted_root or AGENT_ENV not in env:
            continue
        if agent_id is not None and env.get(AGENT_ENV) != agent_id:
            continue
        found.append(proc)
    return found


def signal_all(procs: Iterable[psutil.Process], signum: int) -> None:
    """Send ``signum`` to each process, ignoring those already gone."""
    for proc in procs:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            proc.send_signal(signum)


def kill_all(procs: Sequence[psutil.Process], *, grace_s: float) -> list[psutil.Process]:
    """SIGTERM ``procs``, SIGKILL those still alive after ``grace_s``; wait for them.

    Returns:
        The processes that survived even SIGKILL (should be empty; a process
        stuck in uninterruptible sleep may linger).

    """
    if not procs:
        return []
    signal_all(procs, signal.SIGTERM)
    _gone, alive = psutil.wait_procs(procs, timeout=grace_s) if grace_s > 0 else ([], list(procs))
    if not alive:
        return []
    signal_all(alive, signal.SIGKILL)
    _gone, alive = psutil.wait_procs(alive, timeout=5.0)
    return list(alive)


def reap_orphans(known: Iterable[int] = ()) -> list[tuple[int, int]]:
    """Collect exit statuses of zombie children not in ``known`` (orphans adopted as subreaper).

    Returns:
        ``(pid, wait status)`` of each reaped child.

    """
    skip = set(known)
    reaped = []
    try:
        children = psutil.Process().children()
    except psutil.NoSuchProcess:  # pragma: no cover - we are alive
        return []
    for child in children:
        if child.pid in skip:
            continue
        try:
            if child.status() != psutil.STATUS_ZOMBIE:
                continue
            pid, status = os.waitpid(child.pid, os.WNOHANG)
        except (psutil.NoSuchProcess, ChildProcessError):
            continue
        if pid:
            reaped.append((pid, status))
    return reaped


def describe_exit(returncode: int | None) -> str:
    """A dead child's end in words: ``exit code 1`` or ``signal SIGKILL``."""
    if returncode is None:
        return "exited (status unknown: not a child of this supervisor)"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = str(-returncode)
        return f"signal {name}"
    return f"exit code {returncode}"


def wait_gone(procs: Sequence[psutil.Process], *, timeout_s: float) -> list[psutil.Process]:
    """Wait until ``procs`` are gone or ``timeout_s`` passes; returns the ones still alive."""
    deadline = time.monotonic() + timeout_s
    alive = list(procs)
    while alive and time.monotonic() < deadline:
        _gone, alive = psutil.wait_procs(
            alive, timeout=min(0.2, max(0.0, deadline - time.monotonic()))
        )
    return alive
