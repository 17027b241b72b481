"""The agent's side of a host's guard (:mod:`loopx.agents.guard`): start it, tell it, release it.

The guard ends the host's tree if this process dies before :meth:`HostGuard.release`
(issue 28 item 7). Starting it is best effort: when the machine refuses
(EMFILE, ENOMEM, EAGAIN) the host still runs, supervised by this agent alone,
and the agent says so in its log (``host_guard_unavailable``).
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
    """One run's guard process, or nothing when it could not be started."""

    def __init__(self, proc: subprocess.Popen[bytes] | None) -> None:
        self._proc = proc

    @classmethod
    def start(cls, run_id: str, *, grace_s: float) -> HostGuard:
        """Start the guard of run ``run_id`` in its own session, before the host starts."""
        try:
            proc = subprocess.Popen(
                [sys.executable, "-I", "-S", str(GUARD_SCRIPT), run_id, f"{grace_s:g}"],
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

    def watch(self, host_pid: int) -> None:
        """Tell the guard the host's pid (its process group)."""
        self._say(f"pid {host_pid}\n".encode())

    def release(self) -> None:
        """The run is over and swept: let the guard go without killing, and reap it."""
        proc = self._proc
        if proc is None:
            return
        self._say(b"done\n")
        if proc.stdin is not None:
            with contextlib.suppress(OSError):
                proc.stdin.close()
        if not _exits_within(proc.pid, _REAP_S):
            log.warning("host_guard_lingers", pid=proc.pid)
            proc.kill()
        proc.wait()  # no timeout: Popen.wait(timeout) sleeps, which faketime can break (EINVAL)
        self._proc = None

    def _say(self, line: bytes) -> None:
        proc = self._proc
        if proc is None or proc.stdin is None:
            return
        try:
            proc.stdin.write(line)
            proc.stdin.flush()
        except OSError as e:  # the guard died (killed by someone): the run goes on unguarded
            log.warning("host_guard_lost", pid=proc.pid, error=str(e))
