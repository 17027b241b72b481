"""The host guard: ends a host's whole tree when its agent dies, whatever killed the agent.

Without a guard, after SIGKILL of the supervisor and its agents mid-turn, the
real CLIs (node, the native codex binary) ran on with ppid 1, edited the
workdir and wrote the result a retry would use. ``PR_SET_PDEATHSIG`` reaches
only the direct child, and a host that ``setsid``s leaves its group.

So every agent has a guard: a tiny process (``python -I -S guard.py``,
standard library only) in its own session, started by the agent before its
first host with a pipe as its stdin, and kept for every run after (starting
one per run cost a host turn 20 ms). For each run the agent writes
``run <run id> <grace s>`` before the host starts, ``pid <host pid>`` once it
started and ``done`` once the run is over and swept. When the pipe closes
during a run (the agent died, by any signal), the guard ends every process
of the run: the host's
process group while its leader is the one it was told of, every process of
that group started after it, and every process carrying this run's
``LOOPX_HOST_RUN`` (inherited through ``setsid``, double forks and exec),
SIGTERM first, SIGKILL after a grace, in rounds until none is left. When it
closes between runs (the agent exited), the guard exits.

It is run as a script, never imported by LoopX: nothing here may import
``loopx`` (the interpreter runs isolated, without site-packages).

Usage: ``python -I -S guard.py`` (the runs arrive on stdin).
"""

from __future__ import annotations

import os
import signal
import sys
import time

_ROUNDS_S = 10.0  # how long the guard keeps sweeping after the agent died
_POLL_S = 0.05


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, pgid, start time in ticks) of a process, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    # The command name is in parentheses and may hold spaces or ')'.
    fields = data[data.rfind(b")") + 2 :].split()
    try:
        return fields[0].decode(), int(fields[2]), int(fields[19])
    except (IndexError, ValueError):
        return None


def _carries(pid: int, needle: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return needle in f.read().split(b"\0")
    except OSError:
        return False


def _members(needle: bytes, leader: tuple[int, int] | None) -> list[int]:
    """Live processes of the run: those carrying ``needle``, and the leader's group."""
    me = os.getpid()
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        pid = int(name)
        st = _stat(pid)
        if st is None or st[0] in {"Z", "X"}:
            continue
        in_group = leader is not None and st[1] == leader[0] and st[2] >= leader[1]
        if in_group or _carries(pid, needle):
            out.append(pid)
    return out


def _kill(pids: list[int], signum: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, signum)
        except OSError:
            continue


def end_run(run_id: str, leader: tuple[int, int] | None, grace_s: float) -> int:
    """SIGTERM every process of the run, SIGKILL what is left after ``grace_s``; return how many."""
    needle = f"LOOPX_HOST_RUN={run_id}".encode()
    found = _members(needle, leader)
    seen = set(found)
    _kill(found, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while found and time.monotonic() < deadline:
        time.sleep(_POLL_S)
        found = _members(needle, leader)
        seen.update(found)
    end = time.monotonic() + _ROUNDS_S
    while found and time.monotonic() < end:
        _kill(found, signal.SIGKILL)
        time.sleep(_POLL_S)
        found = _members(needle, leader)
        seen.update(found)
    return len(seen)


_Run = tuple[str, float, tuple[int, int] | None]  # run id, grace, the host leader (pid, start)


def _heard(run: _Run | None, line: bytes) -> _Run | None:
    """The run being guarded after the agent's ``line``."""
    if line.startswith(b"run "):
        _, run_id, grace = line.decode().split()
        return run_id, float(grace), None
    if line.startswith(b"pid ") and run is not None:
        pid = int(line[4:])
        st = _stat(pid)
        return run[0], run[1], (pid, st[2]) if st is not None else None
    if line == b"done":
        return None
    return run


def main(argv: list[str]) -> int:
    """Follow the agent's runs on stdin; end the current one if the pipe closes before its ``done``."""
    del argv
    # Signals the agent's terminal or session may send are not the agent's death.
    for signum in (signal.SIGINT, signal.SIGHUP, signal.SIGPIPE):
        signal.signal(signum, signal.SIG_IGN)
    run: _Run | None = None
    buffer = b""
    while True:
        try:
            chunk = os.read(0, 4096)
        except InterruptedError:
            continue
        except OSError:
            chunk = b""
        if not chunk:
            break
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            run = _heard(run, line)
    if run is not None:
        end_run(run[0], run[2], run[1])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
