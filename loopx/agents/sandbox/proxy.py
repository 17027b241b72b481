"""The sandbox's only way out: an HTTP proxy on a Unix socket, served by the agent outside.

Three kinds of request reach it, through the bridge inside the sandbox
(:mod:`loopx.agents.sandbox.bridge`):

* ``CONNECT host:port``: a tunnel (TLS to a package registry, the forge),
  opened only to an allowed domain;
* ``GET http://host/...`` (absolute form): plain HTTP, forwarded likewise;
* ``POST /v1/...`` (origin form): the provider route. The host's base URL
  points at the bridge, so its model requests come here; the proxy adds the
  account's key (the host holds a placeholder: :class:`Provider`), forwards
  to the provider's real URL (TLS when it is https), and records the
  response's rate-limit and usage headers for the account.

Everything else is refused with a 403 that names the target, and counted
(:class:`~loopx.sandbox.NetworkReport`); bytes both ways are counted.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final
from urllib.parse import urlsplit

from loopx.log import get_logger
from loopx.sandbox import NetworkReport, Refusal, domain_allowed

log = get_logger(__name__)

_HEAD_LIMIT: Final = 64 * 1024
_CHUNK: Final = 65536
_CONNECT_TIMEOUT_S: Final = 10.0
# Response headers the account learns from (rate-limit windows, usage, retry advice).
_RECORDED: Final = ("ratelimit", "rate-limit", "retry-after", "usage", "quota")


@dataclass(frozen=True, slots=True)
class Provider:
    """The account's provider endpoint: where the provider route goes, and the keys it adds."""

    url: str  # the provider's base URL (http or https), e.g. https://api.anthropic.com
    # placeholder -> key: the host's environment holds the placeholder, requests get the key
    keys: dict[str, str] = field(default_factory=dict)

    @property
    def endpoint(self) -> tuple[str, int]:
        """The provider's host and port: always allowed, on that port alone."""
        url = urlsplit(self.url)
        return url.hostname or "", url.port or (443 if url.scheme == "https" else 80)


@dataclass(slots=True)
class _Counters:
    lock: threading.Lock = field(default_factory=threading.Lock)
    up: int = 0
    down: int = 0
    injected: int = 0
    refused: dict[str, int] = field(default_factory=dict)


class _Head:
    """A request or response head: its first line and headers, as read."""

    def __init__(self, raw: bytes) -> None:
        text = raw.decode("latin-1")
        lines = text.split("\r\n")
        self.line = lines[0]
        self.headers: list[tuple[str, str]] = []
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if sep:
                self.headers.append((name.strip(), value.strip()))

    def encode(self, line: str, drop: tuple[str, ...] = (), add: tuple[str, ...] = ()) -> bytes:
        kept = [f"{k}: {v}" for k, v in self.headers if k.lower() not in drop]
        return ("\r\n".join([line, *kept, *add]) + "\r\n\r\n").encode("latin-1")


def _with_keys(
    headers: list[tuple[str, str]], keys: dict[str, str]
) -> tuple[list[tuple[str, str]], int]:
    """The headers with each placeholder replaced by its key; 1 if any was, else 0."""
    out, injected = [], 0
    for name, value in headers:
        new = value
        for placeholder, key in keys.items():
            new = new.replace(placeholder, key)
        injected |= new != value
        out.append((name, new))
    return out, injected


def _read_head(sock: socket.socket) -> tuple[bytes, bytes] | None:
    """The head up to the blank line, and whatever came after it; None: the peer hung up."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(_CHUNK)
        if not chunk or len(data) > _HEAD_LIMIT:
            return None
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    return head, rest


class NetworkProxy:
    """The proxy of one sandboxed turn; :meth:`report` says what it let through and refused."""

    def __init__(
        self,
        socket_path: Path,
        allowed: list[str],
        provider: Provider | None = None,
        on_headers: Callable[[dict[str, str]], None] | None = None,
    ) -> None:
        self.domains = sorted(allowed)
        self.provider = provider
        host, port = provider.endpoint if provider is not None else ("", 0)
        self.allowed = [*self.domains, *([f"{host}:{port}"] if host else [])]
        self.on_headers = on_headers
        self.counters = _Counters()
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(socket_path))
        self.listener.listen(64)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        """Accept until closed; each connection served by a thread of its own."""
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._handle_closing, args=(client,), daemon=True).start()

    def _handle_closing(self, client: socket.socket) -> None:
        with client:
            self.handle(client)

    def close(self) -> None:
        """Stop accepting (at once: no poll interval to wait out); open tunnels end with the sandbox."""
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
        self.listener.close()
        self.thread.join(timeout=1.0)

    def report(self) -> NetworkReport:
        """What was allowed, refused and carried since the last report; counters reset."""
        c = self.counters
        with c.lock:
            report = NetworkReport(
                allowed=self.allowed,
                refused=[Refusal(target=t, count=n) for t, n in sorted(c.refused.items())],
                bytes_up=c.up,
                bytes_down=c.down,
                keys_injected=c.injected,
            )
            c.up = c.down = c.injected = 0
            c.refused = {}
        return report

    def handle(self, client: socket.socket) -> None:
        """Serve one connection from the sandbox."""
        got = _read_head(client)
        if got is None:
            return
        head, rest = _Head(got[0]), got[1]
        method, _, target = head.line.partition(" ")
        target = target.rsplit(" ", 1)[0]
        if method == "CONNECT":
            self._tunnel(client, target, rest)
        elif target.startswith("http://"):
            self._forward(client, head, method, target, rest)
        elif target.startswith("/"):
            self._provider(client, head, method, target, rest)
        else:
            self._refuse(client, target or "?")

    def _permitted(self, client: socket.socket, host: str, port: int) -> bool:
        provider = self.provider is not None and (host, port) == self.provider.endpoint
        if provider or domain_allowed(host, self.domains):
            return True
        self._refuse(client, f"{host}:{port}")
        return False

    def _refuse(self, client: socket.socket, target: str) -> None:
        with self.counters.lock:
            self.counters.refused[target] = self.counters.refused.get(target, 0) + 1
        log.info("sandbox_connection_refused", target=target)
        body = f"loopx sandbox: {target} is not in this goal's allow-list\n".encode()
        with contextlib.suppress(OSError):
            client.sendall(
                b"HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nConnection: close\r\n"
                + f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )

    def _tunnel(self, client: socket.socket, target: str, rest: bytes) -> None:
        host, _, port_text = target.rpartition(":")
        port = int(port_text) if port_text.isdigit() else 443
        host = host.strip("[]")
        if not self._permitted(client, host, port):
            return
        try:
            upstream = socket.create_connection((host, port), timeout=_CONNECT_TIMEOUT_S)
        except OSError as e:
            self._bad_gateway(client, f"{host}:{port}", e)
            return
        upstream.settimeout(None)
        client.sendall(b"HTTP/1.1 200 Connection Established\r\n\r\n")
        self._splice(client, upstream, rest)

    def _forward(
        self, client: socket.socket, head: _Head, method: str, target: str, rest: bytes
    ) -> None:
        url = urlsplit(target)
        host, port = url.hostname or "", url.port or 80
        if not self._permitted(client, host, port):
            return
        path = (url.path or "/") + (f"?{url.query}" if url.query else "")
        try:
            upstream = socket.create_connection((host, port), timeout=_CONNECT_TIMEOUT_S)
        except OSError as e:
            self._bad_gateway(client, f"{host}:{port}", e)
            return
        upstream.settimeout(None)
        drop = ("proxy-connection", "proxy-authorization", "connection")
        upstream.sendall(head.encode(f"{method} {path} HTTP/1.1", drop, ("Connection: close",)))
        self._splice(client, upstream, rest)

    def _provider(
        self, client: socket.socket, head: _Head, method: str, target: str, rest: bytes
    ) -> None:
        provider = self.provider
        if provider is None:
            self._refuse(client, f"provider route {target.split('?', maxsplit=1)[0]}")
            return
        base = urlsplit(provider.url)
        port = base.port or (443 if base.scheme == "https" else 80)
        try:
            upstream = socket.create_connection((base.hostname, port), timeout=_CONNECT_TIMEOUT_S)
            if base.scheme == "https":
                context = ssl.create_default_context()
                upstream = context.wrap_socket(upstream, server_hostname=base.hostname)
        except OSError as e:
            self._bad_gateway(client, f"{base.hostname}:{port}", e)
            return
        upstream.settimeout(None)
        head.headers, injected = _with_keys(head.headers, provider.keys)
        with self.counters.lock:
            self.counters.injected += injected
        path = base.path.rstrip("/") + target
        line = f"{method} {path} HTTP/1.1"
        drop = ("host", "connection", "proxy-connection")
        upstream.sendall(head.encode(line, drop, (f"Host: {base.netloc}", "Connection: close")))
        self._splice(client, upstream, rest, record=True)

    def _bad_gateway(self, client: socket.socket, target: str, error: OSError) -> None:
        body = f"loopx sandbox: cannot reach {target}: {error.strerror or error}\n".encode()
        with contextlib.suppress(OSError):
            client.sendall(
                b"HTTP/1.1 502 Bad Gateway\r\nConnection: close\r\n"
                + f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )

    def _splice(
        self, client: socket.socket, upstream: socket.socket, rest: bytes, *, record: bool = False
    ) -> None:
        """Carry bytes both ways until the upstream ends; the first response head recorded."""
        if rest:
            upstream.sendall(rest)
            self._count(up=len(rest))
        sender = threading.Thread(target=self._copy_up, args=(client, upstream), daemon=True)
        sender.start()
        first = True
        with contextlib.suppress(OSError):
            while data := upstream.recv(_CHUNK):
                if first and record:
                    self._record(data)
                first = False
                client.sendall(data)
                self._count(down=len(data))
        with contextlib.suppress(OSError):
            client.shutdown(socket.SHUT_WR)
        upstream.close()

    def _copy_up(self, client: socket.socket, upstream: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := client.recv(_CHUNK):
                upstream.sendall(data)
                self._count(up=len(data))
        if not isinstance(upstream, ssl.SSLSocket):  # TLS ends with its own close, not a FIN
            with contextlib.suppress(OSError):  # the sandbox's side ended: tell the upstream
                upstream.shutdown(socket.SHUT_WR)

    def _count(self, *, up: int = 0, down: int = 0) -> None:
        with self.counters.lock:
            self.counters.up += up
            self.counters.down += down

    def _record(self, data: bytes) -> None:
        """Tell the account the response's rate-limit and usage headers."""
        if self.on_headers is None:
            return
        head = _Head(data.partition(b"\r\n\r\n")[0])
        seen = {k.lower(): v for k, v in head.headers if any(w in k.lower() for w in _RECORDED)}
        if seen:
            try:
                self.on_headers(seen)
            except OSError as e:  # the account's file is advice; the turn goes on
                log.warning("rate_limit_headers_not_recorded", error=str(e))


__all__ = ["NetworkProxy", "Provider"]
