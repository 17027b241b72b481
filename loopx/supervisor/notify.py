"""sd_notify spoken directly: datagrams to ``$NOTIFY_SOCKET`` (see sd_notify(3)).

No dependency is needed: the protocol is ``KEY=VALUE`` lines in one datagram
to a unix socket whose path is in ``NOTIFY_SOCKET`` (a leading ``@`` means
the Linux abstract namespace). Without the variable every call is a no-op,
so the supervisor runs the same under systemd and in a terminal.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Mapping
from typing import Final

from loopx.log import get_logger

log = get_logger(__name__)

NOTIFY_SOCKET_ENV: Final = "NOTIFY_SOCKET"
WATCHDOG_USEC_ENV: Final = "WATCHDOG_USEC"
WATCHDOG_PID_ENV: Final = "WATCHDOG_PID"
# What systemd hands the unit's main process only: a child that kept it would notify for it.
MAIN_PROCESS_ONLY: Final = (
    NOTIFY_SOCKET_ENV,
    WATCHDOG_USEC_ENV,
    WATCHDOG_PID_ENV,
    "LISTEN_FDS",
    "LISTEN_PID",
)


def child_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` for a child process: without what systemd meant for this process only."""
    return {k: v for k, v in env.items() if k not in MAIN_PROCESS_ONLY}


def socket_address(value: str) -> str | bytes:
    """The connectable address for a ``NOTIFY_SOCKET`` value (``@name`` is abstract)."""
    if value.startswith("@"):
        return b"\0" + value[1:].encode()
    return value


def watchdog_interval_s(env: Mapping[str, str], *, pid: int) -> float | None:
    """How often to send ``WATCHDOG=1``: half of ``WATCHDOG_USEC``, as systemd recommends.

    None when no watchdog is asked for, or ``WATCHDOG_PID`` names another process.
    """
    usec = env.get(WATCHDOG_USEC_ENV)
    if not usec:
        return None
    wanted_pid = env.get(WATCHDOG_PID_ENV)
    if wanted_pid and wanted_pid.isdigit() and int(wanted_pid) != pid:
        return None
    try:
        value = int(usec)
    except ValueError:
        return None
    return value / 2 / 1_000_000 if value > 0 else None


class Notifier:
    """Sends state changes to systemd (or whoever listens on ``NOTIFY_SOCKET``)."""

    def __init__(self, env: Mapping[str, str]) -> None:
        raw = env.get(NOTIFY_SOCKET_ENV) or ""
        self.address: str | bytes | None = socket_address(raw) if raw else None
        self.watchdog_s = watchdog_interval_s(env, pid=os.getpid())
        self._sock: socket.socket | None = None

    @property
    def enabled(self) -> bool:
        """Whether a notify socket was given."""
        return self.address is not None

    def send(self, *lines: str) -> bool:
        """Send ``KEY=VALUE`` lines as one datagram; never raises (systemd may be gone).

        Returns:
            True when the datagram was sent.

        """
        if self.address is None:
            return False
        try:
            if self._sock is None:
                self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
            self._sock.sendto("\n".join(lines).encode(), self.address)
        except OSError as e:
            log.warning("sd_notify_failed", error=str(e))
            return False
        return True

    def ready(self, status: str) -> bool:
        """``READY=1`` with a status line: start-up (recovery, spawn) is done."""
        return self.send("READY=1", f"STATUS={status}", f"MAINPID={os.getpid()}")

    def status(self, text: str) -> bool:
        """``STATUS=`` line shown by ``systemctl status``."""
        return self.send(f"STATUS={text}")

    def reloading(self) -> bool:
        """``RELOADING=1`` while SIGHUP is handled."""
        return self.send("RELOADING=1")

    def watchdog(self) -> bool:
        """``WATCHDOG=1``: the main loop is alive."""
        return self.send("WATCHDOG=1")

    def stopping(self, status: str = "stopping") -> bool:
        """``STOPPING=1``: the fleet is draining."""
        return self.send("STOPPING=1", f"STATUS={status}")

    def extend_timeout(self, seconds: float) -> bool:
        """``EXTEND_TIMEOUT_USEC``: ask systemd for ``seconds`` more before it kills the stop."""
        return self.send(f"EXTEND_TIMEOUT_USEC={int(seconds * 1_000_000)}")

    def close(self) -> None:
        """Close the socket."""
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()
            self._sock = None
