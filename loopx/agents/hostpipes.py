"""A host's three pipes, served from one ``select`` loop in the calling thread, and bounded capture.

The loop feeds the envelope to stdin, reads stdout and stderr as they fill
(keeping the first 1 MiB of each and counting the rest, so a chatty host can
neither fill memory nor block on a full pipe) and waits on the host's pidfd
in the same ``select``, so it wakes the moment the host exits: no reader
threads, and no polling where the kernel has pidfds (Linux 5.3 and later).
"""

from __future__ import annotations

import contextlib
import os
import select
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, Final

from loopx.process import child_running
from loopx.turn.journal import OUTPUT_LIMIT_BYTES

_READ_CHUNK: Final = 64 * 1024


@dataclass(slots=True)
class Capture:
    """One output stream: the first ``limit`` bytes kept, the rest counted.

    ``tee`` and ``echo`` are views and must not raise: a raise here ends the
    host before its outcome is recorded, and recovery runs it again.
    """

    limit: int = OUTPUT_LIMIT_BYTES
    kept: bytearray = field(default_factory=bytearray)
    dropped: int = 0
    tee: Callable[[bytes], None] | None = None  # also sees every chunk (the live tail)
    echo: Callable[[bytes], None] | None = None  # shown live (an agent's console)
    last_at: float | None = None  # time.monotonic() of the newest chunk: the stall watch's clock

    def feed(self, chunk: bytes) -> None:
        """Keep what fits under the limit, count the rest."""
        self.last_at = time.monotonic()
        if self.tee is not None:
            self.tee(chunk)
        if self.echo is not None:
            self.echo(chunk)
        room = self.limit - len(self.kept)
        if room > 0:
            self.kept += chunk[:room]
        self.dropped += max(len(chunk) - max(room, 0), 0)

    def text(self) -> str:
        """The kept bytes, decoded with replacement."""
        return self.kept.decode("utf-8", errors="replace")


class Pipes:
    """The host's three pipes, served from one ``select`` loop in the calling thread."""

    def __init__(
        self, proc: subprocess.Popen[bytes], stdin: bytes, out: Capture, err: Capture
    ) -> None:
        # PIPEs were asked for all three.
        assert proc.stdin is not None  # noqa: S101
        assert proc.stdout is not None  # noqa: S101
        assert proc.stderr is not None  # noqa: S101
        self._pid = proc.pid
        self._files: list[IO[bytes]] = [proc.stdin, proc.stdout, proc.stderr]
        self._readers: dict[int, Capture] = {proc.stdout.fileno(): out, proc.stderr.fileno(): err}
        self._stdin_fd: int | None = proc.stdin.fileno()
        self._stdin = memoryview(stdin)
        for fd in (self._stdin_fd, *self._readers):
            os.set_blocking(fd, False)
        if not stdin:
            self._close_stdin()

    def serve(self, pidfd: int | None, timeout: float) -> bool:
        """Move bytes until the host exits (True) or ``timeout`` passes (False); never reaps.

        Without a pidfd (kernels before 5.3) the exit is polled every 5 ms.
        """
        deadline = time.monotonic() + max(timeout, 0.0)
        while True:
            left = deadline - time.monotonic()
            waits = [*self._readers] + ([pidfd] if pidfd is not None else [])
            writes = [self._stdin_fd] if self._stdin_fd is not None else []
            cap = left if pidfd is not None else min(left, 0.005)
            try:
                readable, writable, _ = select.select(waits, writes, [], max(cap, 0.0))
            except InterruptedError:  # pragma: no cover - PEP 475 retries; kept for clarity
                continue
            if writable:
                self._feed()
            for fd in readable:
                if fd != pidfd:
                    self._read(fd)
            exited = pidfd in readable if pidfd is not None else not child_running(self._pid)
            if exited:
                return True
            if time.monotonic() >= deadline:
                return False

    def held_elsewhere(self) -> bool:
        """After the host exited: whether another process still holds its stdout or stderr.

        Reads what is buffered; a pipe that is then empty but not at EOF has a
        writer left, and the host's own descriptors are closed before its
        pidfd reports the exit, so that writer is a descendant that outlived
        it (a ``setsid`` grandchild inherits the pipes), found without a scan.
        """
        for fd in list(self._readers):
            while fd in self._readers:
                try:
                    chunk = os.read(fd, _READ_CHUNK)
                except BlockingIOError:
                    return True
                except OSError:
                    chunk = b""
                if chunk:
                    self._readers[fd].feed(chunk)
                else:
                    del self._readers[fd]
        return False

    def drain(self, deadline: float) -> None:
        """After the host exited: read what its pipes still hold until EOF or ``deadline``."""
        self._close_stdin()
        while self._readers:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            readable, _, _ = select.select([*self._readers], [], [], left)
            for fd in readable:
                self._read(fd)

    def close(self) -> None:
        """Close our ends of every pipe."""
        for f in self._files:
            with contextlib.suppress(OSError):
                f.close()
        self._readers.clear()
        self._stdin_fd = None

    def _read(self, fd: int) -> None:
        try:
            chunk = os.read(fd, _READ_CHUNK)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if chunk:
            self._readers[fd].feed(chunk)
        else:
            del self._readers[fd]  # EOF: every writer closed it

    def _feed(self) -> None:
        # A host that never reads stdin (or exits early) must not fail the turn.
        try:
            sent = os.write(self._stdin_fd, self._stdin[:_READ_CHUNK])  # type: ignore[arg-type]
        except BlockingIOError:
            return
        except OSError:  # BrokenPipeError: the host closed its stdin
            self._close_stdin()
            return
        self._stdin = self._stdin[sent:]
        if not self._stdin:
            self._close_stdin()

    def _close_stdin(self) -> None:
        if self._stdin_fd is not None:
            with contextlib.suppress(OSError):
                self._files[0].close()
            self._stdin_fd = None


__all__ = ["Capture", "Pipes"]
