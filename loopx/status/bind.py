"""Who may serve where: loopback freely, any other address (and actions) only with a token.

Standard library only: ``Root.serve``'s and ``loopx serve``'s checks run
before anything of the HTTP stack is imported or a socket opened.
"""

from __future__ import annotations

import ipaddress

from loopx.errors import UsageError


class ActionsNeedTokenError(UsageError):
    """Actions on a server without a token would let any local page change goals."""

    def __init__(self) -> None:
        super().__init__(
            "refusing to enable actions without a token",
            hint="pass --token T (or set LOOPX_SERVE_TOKEN); the dashboard asks for it once",
        )


class InsecureBindError(UsageError):
    """A non-loopback bind without a token would expose the root to the network."""

    def __init__(self, host: str) -> None:
        super().__init__(
            f"refusing to serve on {host} without a token: it is not a loopback address",
            hint="pass --token T (clients send `Authorization: Bearer T`) or bind 127.0.0.1",
        )
        self.host = host


def is_loopback(host: str) -> bool:
    """Whether ``host`` names only this machine (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_bind(host: str, token: str | None, *, actions: bool = False) -> None:
    """Refuse a non-loopback bind, or actions, without a token.

    Raises:
        InsecureBindError: ``host`` is not loopback and ``token`` is empty.
        ActionsNeedTokenError: ``actions`` without a token.

    """
    if not is_loopback(host) and not token:
        raise InsecureBindError(host)
    if actions and not token:
        raise ActionsNeedTokenError
