"""Linux ``/proc`` reads for watching one process tree at the cost of its own processes.

psutil's ``children()`` builds a map of every process's parent, which reads
the ``stat`` file of every process on the machine: sampling a sleeping host
that way every 50 ms cost its agent 6% of a core, growing with whatever
else the machine runs. Here a tree is followed by what identifies it
instead: one ``stat`` read per process of the tree (parent, state, start
time, CPU and RSS in one line), and the kernel's counter of the last pid it
handed out, which tells in one small read whether any process was created
since the last look. Only then are the new pids (those past the previous
value of the counter) read, to see whose child they are.

Each function does one read and returns None (or nothing) when the file is
not there: a process that ended, or a system without ``/proc``.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from typing import Final

# The pid the kernel handed out last in this pid namespace (``ns_last_pid``);
# /proc/loadavg's last field says the same where the sysctl is not readable.
_LAST_PID: Final = "/proc/sys/kernel/ns_last_pid"
_LOADAVG: Final = "/proc/loadavg"
_READ: Final = 4096
# Fields of /proc/<pid>/stat after the command name (proc(5), counted from 3).
_STATE, _PPID, _UTIME, _STIME, _START, _RSS = 0, 1, 11, 12, 19, 21


@dataclass(frozen=True, slots=True)
class Stat:
    """One process as its ``/proc/<pid>/stat`` shows it."""

    pid: int
    ppid: int
    state: str  # "R", "S", ... "Z" for a zombie
    start: int  # start time in clock ticks after boot: with the pid, the process's identity
    cpu_s: float  # user + system time of the process itself
    rss_bytes: int

    @property
    def zombie(self) -> bool:
        """Whether it ended and waits for its parent to collect it."""
        return self.state in {"Z", "X"}


@functools.cache
def available() -> bool:
    """Whether this system has a Linux ``/proc`` (checked once per process)."""
    return _read(f"/proc/{os.getpid()}/stat") is not None


@functools.cache
def _units() -> tuple[int, int]:
    """Clock ticks per second and the page size, in which ``stat`` counts time and RSS."""
    return os.sysconf("SC_CLK_TCK"), os.sysconf("SC_PAGE_SIZE")


def _read(path: str) -> bytes | None:
    # os.open/os.read: no Python file object, about half the cost of open().
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        return os.read(fd, _READ)
    except OSError:
        return None
    finally:
        os.close(fd)


def read_stat(pid: int) -> Stat | None:
    """Process ``pid`` now, or None when it is gone."""
    data = _read(f"/proc/{pid}/stat")
    if data is None:
        return None
    # The command name is in parentheses and may hold spaces or ')'.
    fields = data[data.rfind(b")") + 2 :].split()
    ticks, page = _units()
    try:
        return Stat(
            pid=pid,
            ppid=int(fields[_PPID]),
            state=fields[_STATE].decode(),
            start=int(fields[_START]),
            cpu_s=(int(fields[_UTIME]) + int(fields[_STIME])) / ticks,
            rss_bytes=int(fields[_RSS]) * page,
        )
    except (IndexError, ValueError):
        return None


def high_water(pid: int) -> int | None:
    """The largest RSS process ``pid`` has had since it started its program (``VmHWM``), in bytes.

    None for a zombie (its memory is released) or a process that is gone.
    """
    data = _read(f"/proc/{pid}/status")
    if data is None:
        return None
    at = data.find(b"VmHWM:")
    if at < 0:
        return None
    try:
        return int(data[at + 6 : data.index(b"kB", at)]) * 1024
    except ValueError:
        return None


def last_pid() -> int | None:
    """The pid the kernel handed out last (to a process or a thread), or None when unknown."""
    data = _read(_LAST_PID)
    if data is None:
        data = _read(_LOADAVG)
        data = data.split()[-1] if data else None
    try:
        return int(data) if data else None
    except ValueError:
        return None


def pids() -> list[int]:
    """The pids of every process (not thread) now; empty without ``/proc``."""
    try:
        return [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return []


__all__ = ["Stat", "available", "high_water", "last_pid", "pids", "read_stat"]
