"""A socket reader bounded by a deadline for the whole request, not per read (issue 18)."""

from __future__ import annotations

import io
import math
import socket
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer


class DeadlineReader(io.RawIOBase):
    """A socket's read side that waits no longer than the current request's deadline.

    A socket timeout bounds each read, so a client sending one byte every few
    seconds could hold a connection for as long as it likes; this bounds the
    sum (issue 18). The socket's timeout is restored after each read, so
    replies are written with the ordinary per-write timeout.
    """

    def __init__(self, sock: socket.socket, io_timeout: float) -> None:
        super().__init__()
        self._sock = sock
        self._io_timeout = io_timeout
        self.deadline = math.inf

    def readable(self) -> bool:
        """A reader."""
        return True

    def readinto(self, buffer: WriteableBuffer) -> int:
        """Read what is there, waiting at most until the deadline.

        Raises:
            TimeoutError: the deadline passed (the stdlib handler closes the connection).

        """
        left = self.deadline - time.monotonic()
        if left <= 0:
            msg = "request not complete within its deadline"
            raise TimeoutError(msg)
        self._sock.settimeout(min(left, self._io_timeout))
        try:
            return self._sock.recv_into(buffer)
        finally:
            self._sock.settimeout(self._io_timeout)
