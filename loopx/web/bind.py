"""Who may serve where, and which Host names are answered.

Loopback freely, any other address (and actions) only with a token; a token
never on the command line; the Host allow-list against DNS rebinding.

Standard library only: ``Root.serve``'s and ``loopx serve``'s checks run
before anything of the HTTP stack is imported or a socket opened.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from loopx.errors import UsageError


class ActionsNeedTokenError(UsageError):
    """Actions on a server without a token would let any local page change goals."""

    def __init__(self) -> None:
        super().__init__(
            "refusing to enable actions without a token",
            hint="drop --no-token: serve makes a token and prints the URL that carries it",
        )


class InsecureBindError(UsageError):
    """A non-loopback bind without a token would expose the root to the network."""

    def __init__(self, host: str) -> None:
        super().__init__(
            f"refusing to serve on {host} without a token: it is not a loopback address",
            hint="pass --token-file FILE or set LOOPX_SERVE_TOKEN (clients send `Authorization: Bearer T`), or bind 127.0.0.1",
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


class TokenInArgvError(UsageError):
    """``--token T`` would show the token to every local user in ``/proc/PID/cmdline``."""

    def __init__(self) -> None:
        super().__init__(
            "refusing --token: a token on the command line is readable by every local user "
            "(ps, /proc/PID/cmdline)",
            hint="put it in a file only you can read and pass --token-file FILE, "
            "or set LOOPX_SERVE_TOKEN",
        )


class NoTokenOffLoopbackError(UsageError):
    """``--no-token`` on an address other machines can reach."""

    def __init__(self, host: str) -> None:
        super().__init__(
            f"refusing --no-token on {host}: without a token anyone who reaches it reads the fleet",
            hint="bind 127.0.0.1, or drop --no-token (serve then makes a token for you)",
        )
        self.host = host


_WILDCARDS = frozenset({"0.0.0.0", "::", ""})  # noqa: S104 - naming the wildcard, not binding it


def _with_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def allowed_hosts(host: str, port: int, extra: Iterable[str] = ()) -> frozenset[str] | None:
    """The ``Host`` header values a server bound to ``host:port`` answers; None: every one. Pure.

    On a loopback bind only ``127.0.0.1:PORT``, ``localhost:PORT`` and
    ``[::1]:PORT`` (a page whose name rebinds to 127.0.0.1 sends its own name,
    and gets 421), plus each ``extra`` name (``--allowed-host``, for a reverse
    proxy: ``NAME`` matches with any port or none, ``NAME:PORT`` exactly). A
    specific other address adds itself. A wildcard bind (``0.0.0.0``, ``::``)
    answers every name unless ``extra`` names some: it needs a token anyway.
    """
    names = {_with_port(h, port) for h in ("127.0.0.1", "localhost", "::1")}
    names |= {e.strip().lower() for e in extra if e.strip()}
    if host in _WILDCARDS:
        return frozenset(names) if any(e.strip() for e in extra) else None
    if not is_loopback(host):
        names.add(_with_port(host.lower(), port))
    return frozenset(names)


def host_allowed(header: str | None, allowed: frozenset[str] | None) -> bool:
    """Whether a request's ``Host`` header is one ``allowed`` names. Pure."""
    if allowed is None:
        return True
    if not header:
        return False
    value = header.strip().lower()
    if value in allowed:
        return True
    name = value.rsplit(":", 1)[0] if not value.endswith("]") else value
    return name != value and name in allowed
