"""The agent's side of its host guard (:mod:`loopx.agents.guard`): start it, tell it each run.

The guard ends a host's tree if this process dies before :meth:`HostGuard.release`
(even by SIGKILL). One guard serves every run of the process; a dead one is
started again before the next run. Starting it is best effort: when the
machine refuses (EMFILE, ENOMEM, EAGAIN) the host still runs, supervised by
this agent alone, and the agent says so in its log (``host_guard_unavailable``).
"""

from __future__ import annotations

import contextlib
import os
import select
import subprocess
import sys
from pathlib import Path
from typing import Final

from loopx.log import get_logger

log = get_logger(__name__)

GUARD_SCRIPT: Final = Path(__file__).with_name("guard.py")
_REAP_S: Final = 2.0


def _exits_within(pid: int, timeout_s: float) -> bool:
    """Whether process ``pid`` (our child) exits within ``timeout_s``: its pidfd, polled."""
    try:
        fd = os.pidfd_open(pid)
    except OSError:  # gone already, or a kernel without pidfds: the blocking wait decides
        return True
    try:
        readable, _, _ = select.select([fd], [], [], timeout_s)
    except OSError:
        return True
    finally:
        os.close(fd)
    return bool(readable)


class HostGuard:
    """One guard process, or nothing when it could not be started."""

    def __init__(self, proc: subprocess.Popen[bytes] | None) -> None:
        self._proc = proc
        self._owner = os.getpid()

    @classmethod
    def start(cls) -> HostGuard:
        """Start a guard in its own session; best effort (see the module's docstring)."""
        try:
            proc = subprocess.Popen(
                [sys.executable, "-I", "-S", str(GUARD_SCRIPT)],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
                close_fds=True,
                env={},
            )
        except OSError as e:
            log.warning("host_guard_unavailable", error=str(e))
            return cls(None)
        return cls(proc)

    @property
    def pid(self) -> int | None:
        """The guard's pid, None without a guard."""
        return self._proc.pid if self._proc is not None else None

    def usable(self) -> bool:
        """Whether it is this process's (not one inherited through a fork) and still runs."""
        proc = self._proc
        return proc is not None and self._owner == os.getpid() and proc.poll() is None

    def begin(self, run_id: str, *, grace_s: float) -> None:
        """Tell the guard run ``run_id`` begins, ended after ``grace_s`` if this process dies."""
        self._say(f"run {run_id} {grace_s:g}\n".encode())

    def watch(self, host_pid: int) -> None:
        """Tell the guard the host's pid (its process group)."""
        self._say(f"pid {host_pid}\n".encode())

    def release(self) -> None:
        """The run is over and swept: the guard forgets it, and waits for the next."""
        self._say(b"done\n")

    def stop(self) -> None:
        """Close its pipe between runs (it exits) and reap it; an inherited one is only let go."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.stdin is not None:
            with contextlib.suppress(OSError):
                proc.stdin.close()
        if self._owner != os.getpid() or proc.returncode is not None:
            return  # not our child to reap, or reaped by usable()
        if not _exits_within(proc.pid, _REAP_S):
            log.warning("host_guard_lingers", pid=proc.pid)
            proc.kill()
        proc.wait()  # no timeout: Popen.wait(timeout) sleeps, which faketime can break (EINVAL)

    def _say(self, line: bytes) -> None:
        proc = self._proc
        if proc is None or proc.stdin is None:
            return
        try:
            proc.stdin.write(line)
            proc.stdin.flush()
        except OSError as e:  # the guard died (killed by someone): the run goes on unguarded
            log.warning("host_guard_lost", pid=proc.pid, error=str(e))


_current: HostGuard | None = None  # this process's guard, shared by its runs


def guard_for_run(run_id: str, *, grace_s: float) -> HostGuard:
    """The guard of this process, told that run ``run_id`` begins; started when none is alive.

    Called before the host starts (and before the subreaper's census, so the
    guard is never taken for a leftover of the run).
    """
    global _current  # noqa: PLW0603 - one guard per process, as there is one process
    if _current is None or not _current.usable():
        if _current is not None:
            _current.stop()
        _current = HostGuard.start()
    _current.begin(run_id, grace_s=grace_s)
    return _current


def stop_guard() -> None:
    """Let this process's guard go between runs (it exits), and reap it: at the agent's exit."""
    global _current
    guard, _current = _current, None
    if guard is not None:
        guard.stop()
