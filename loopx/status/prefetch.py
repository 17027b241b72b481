"""Every goal's fingerprint, taken by a forked child while the CLI starts up.

A ``loopx status --json`` that refreshes checks every goal's files (its
default ``--full-scan-after 0``): a listing and an ``lstat`` per file, about
0.15 s of system calls at 10,000 goals. Before it can use them, the process
spends longer still importing pydantic and the models. Neither needs the
other, so a child forked before those imports takes the fingerprints on the
other core and hands them over a pipe when the refresh asks for them.

A fingerprint taken early is like a remembered one
(:class:`loopx.status.watch.FingerprintMemo`): the refresh takes hinted and
leased goals' afresh, and it reads a goal's files after its fingerprint was
taken, so a change in between shows as a changed fingerprint next time.

Standard library only (with :mod:`loopx.status.fingerprint`).
"""

from __future__ import annotations

import contextlib
import marshal
import os
import signal

from loopx.status.fingerprint import Fingerprint, goal_fingerprint

# Not `from typing import ...`: a warm `loopx status --json` imports no typing (issue 14).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import NoReturn

_CHUNK = 1 << 20


class FingerprintPrefetch:
    """A child process fingerprinting every directory under a root's ``goals/``.

    Its owner calls :meth:`take` when it scans, and :meth:`close` in any case
    (which stops the child if nothing took its answer).
    """

    def __init__(self, pid: int, fd: int) -> None:
        self.pid = pid  # the child's, until it is reaped by take() or close()
        self._fd = fd
        self._open = True

    @classmethod
    def start(cls, goals_dir: str) -> FingerprintPrefetch | None:
        """Fork the child; None on a platform without ``fork``."""
        if not hasattr(os, "fork"):  # pragma: no cover - POSIX only
            return None
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read_end)
            _scan(goals_dir, write_end)
        os.close(write_end)
        return cls(pid, read_end)

    def take(self) -> dict[str, Fingerprint] | None:
        """Wait for the child: each goal directory's fingerprint by goal id.

        None when the child failed or was taken already; the caller then
        fingerprints the goals itself, as it would without a prefetch.
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
            out = marshal.loads(b"".join(chunks))  # noqa: S302 - our own child, over our own pipe
        except (EOFError, ValueError, TypeError):
            return None
        return out if isinstance(out, dict) else None

    def close(self) -> None:
        """Stop the child unless its answer was taken; idempotent."""
        if not self._open:
            return
        self._open = False
        os.close(self._fd)
        # Not reaped yet, so the pid is still the child's.
        os.kill(self.pid, signal.SIGKILL)
        os.waitpid(self.pid, 0)


def _scan(goals_dir: str, fd: int) -> NoReturn:
    """The child: fingerprint, write them to ``fd``, and exit without Python's teardown."""
    code = 1
    try:
        out: dict[str, Fingerprint] = {}
        for name in os.listdir(goals_dir):
            # Not a directory, unreadable: the parent meets it (and says so) itself.
            with contextlib.suppress(OSError):
                out[name] = goal_fingerprint(f"{goals_dir}/{name}")
        data = memoryview(marshal.dumps(out))
        while data:
            data = data[os.write(fd, data) :]
        code = 0
    finally:
        os._exit(code)
