"""Every goal's fingerprint, taken by a forked child while a cold ``status --json`` imports.

A refresh that scans every goal spends a listing and a few ``lstat`` calls
per goal (about 0.2 s at 10,000 goals); before it can start, the process
spends as long importing pydantic and the models. Neither needs the other,
so a child forked before those imports takes the fingerprints on the other
core and hands them over, by pipe, when the refresh asks
(:meth:`Prefetch.fingerprints`).

A fingerprint taken early is used like one the supervisor remembers
(:class:`loopx.status.watch.FingerprintMemo`): the refresh takes afresh the
fingerprints of the goals a hint or a lease names, and it reads a goal's
files after its fingerprint was taken, so a change in between shows as a
changed fingerprint next time. The child is a shortcut, never the only way:
whatever goes wrong in it, the refresh fingerprints the goals itself.

Standard library only: it runs before the imports it overlaps.
"""

from __future__ import annotations

import contextlib
import marshal
import os
import signal

from loopx.process.forking import exited_ok, fork
from loopx.status.fingerprint import Fingerprint, goal_fingerprint

Fingerprints = dict[str, Fingerprint]

_CHUNK = 1 << 20


class Prefetch:
    """A forked child fingerprinting every directory of ``goals_dir``; read or close it once."""

    def __init__(self, pid: int, read_end: int) -> None:
        self.pid: int | None = pid  # None once reaped
        self._fd = read_end

    def fingerprints(self) -> Fingerprints | None:
        """The child's fingerprints by goal id; None when it failed (or was read or closed)."""
        if self.pid is None:
            return None
        chunks = []
        try:
            while chunk := os.read(self._fd, _CHUNK):
                chunks.append(chunk)
        finally:
            os.close(self._fd)
            ok = exited_ok(self.pid)
            self.pid = None
        if not ok:
            return None
        try:
            out = marshal.loads(b"".join(chunks))  # noqa: S302 - our own child, our own pipe
        except (EOFError, ValueError, TypeError):
            return None
        return out if isinstance(out, dict) else None

    def close(self) -> None:
        """Stop and reap the child unless its answer was read; idempotent."""
        if self.pid is None:
            return
        os.close(self._fd)
        os.kill(self.pid, signal.SIGKILL)  # not reaped yet: the pid is still the child's
        os.waitpid(self.pid, 0)
        self.pid = None


def start(goals_dir: str) -> Prefetch | None:
    """A prefetch of ``goals_dir``'s fingerprints, or None where this process may not fork."""
    try:
        read_end, write_end = os.pipe()
    except OSError:  # no descriptor left (EMFILE): the refresh does it itself
        return None

    def send() -> None:
        os.close(read_end)
        data = memoryview(marshal.dumps(_scan(goals_dir)))
        while data:
            data = data[os.write(write_end, data) :]

    pid = fork(send)
    os.close(write_end)
    if pid is None:
        os.close(read_end)
        return None
    return Prefetch(pid, read_end)


def _scan(goals_dir: str) -> Fingerprints:
    out: Fingerprints = {}
    for name in os.listdir(goals_dir):
        # Not a directory, unreadable: the refresh meets it (and says so) itself.
        with contextlib.suppress(OSError):
            out[name] = goal_fingerprint(f"{goals_dir}/{name}")
    return out
