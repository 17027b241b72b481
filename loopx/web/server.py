"""`loopx serve`'s HTTP server: uvicorn running :mod:`loopx.web.app` on a socket bound here.

The socket is bound before uvicorn starts, so a taken port is a clear
:class:`~loopx.errors.UsageError` and port 0 names its real port at once.
Slow and dead clients are dropped by timeouts: the whole request (line,
headers, body) must arrive within ``request_timeout_s`` however it trickles
(:class:`DeadlineProtocol`); an idle keep-alive connection is closed after 5 s;
an event stream whose client takes longer than 10 s to take a frame is ended
(sse-starlette's ``send_timeout``); and TCP keep-alive with a user timeout
ends a connection whose peer vanished without a FIN. The descriptor limit is
raised to its hard limit, so that thousands of streams fit, and both
connections and event streams are capped below it (:func:`descriptor_budget`):
a connection past its cap is answered 503 by uvicorn, a stream past its cap is
a 503 of ``/events``, so ``/healthz`` and ``/status`` answer rather than wait
for a descriptor that streams hold.

Signals record intent (:meth:`HttpServer.handle_signal`): the first SIGINT or
SIGTERM stops accepting, ends every event stream and gives the requests in
flight ``grace_s`` to finish; a second SIGINT stops at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import signal
import socket
import threading
import time
from collections.abc import Iterable, Iterator
from types import FrameType
from typing import Any, Final, NamedTuple

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from loopx import process
from loopx.errors import UsageError
from loopx.log import get_logger
from loopx.root import Layout
from loopx.web.actioncalls import ActionCalls
from loopx.web.app import MAX_HEADER_BYTES, MAX_REQUEST_LINE, build_app
from loopx.web.bind import allowed_hosts, check_bind
from loopx.web.changefeed import ChangeFeed
from loopx.web.service import StatusService
from loopx.web.serving import DEFAULT_HOST, DEFAULT_PORT, SERVE_REFRESH_S, SERVE_TTL_S

REQUEST_TIMEOUT_S: Final = 10.0  # the whole request (line, headers, body), however it trickles
KEEP_ALIVE_S: Final = 5.0
GRACE_S: Final = 5.0  # after a stop request, requests in flight get this long
BACKLOG: Final = 2048
LOOP_ERROR_EVERY_S: Final = 60.0
TCP_USER_TIMEOUT_MS: Final = 20_000  # unacknowledged data for this long: the peer is gone
_KEEPALIVE: Final = (("TCP_KEEPIDLE", 10), ("TCP_KEEPINTVL", 5), ("TCP_KEEPCNT", 3))

log = get_logger(__name__)


class DeadlineProtocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline for each whole request, from its first byte.

    A connection that sends nothing, or trickles its request line, headers or
    body, is closed when the deadline passes; once the request is complete the
    app has it and the deadline no longer applies (an event stream lives on).
    """

    request_timeout_s: float = REQUEST_TIMEOUT_S
    _deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Start the first request's deadline at connect: silence counts too."""
        super().connection_made(transport)  # type: ignore[arg-type]
        self._arm()

    def data_received(self, data: bytes) -> None:
        """Arm the deadline at a request's first byte; disarm it once the request is complete."""
        if self._deadline is None and self.conn.their_state is h11.IDLE:
            self._arm()
        super().data_received(data)
        if self.conn.their_state not in (h11.IDLE, h11.SEND_BODY):
            self._disarm()

    def connection_lost(self, exc: Exception | None) -> None:
        """Drop the deadline with the connection."""
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._deadline = self.loop.call_later(self.request_timeout_s, self._expired)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self) -> None:
        self._deadline = None
        if not self.transport.is_closing():
            self.transport.close()  # no reply: the request never arrived whole


def _deadline_protocol(request_timeout_s: float) -> type[DeadlineProtocol]:
    return type("DeadlineProtocol", (DeadlineProtocol,), {"request_timeout_s": request_timeout_s})


class _Uvicorn(uvicorn.Server):
    """uvicorn's server with our signal handling, ending the event streams first on shutdown."""

    def __init__(self, config: uvicorn.Config, feed: ChangeFeed) -> None:
        super().__init__(config)
        self._feed = feed

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """Signals are :class:`HttpServer`'s (handled by the thread that serves)."""
        yield

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        """End every stream (they would hold the grace period), then uvicorn's shutdown."""
        self._feed.close()
        await super().shutdown(sockets)


class DescriptorBudget(NamedTuple):
    """How the descriptor limit is shared: connections (each one descriptor), streams among them."""

    connections: int
    streams: int


def descriptor_budget(limit: int, in_use: int) -> DescriptorBudget:
    """The caps for a descriptor ``limit`` of which ``in_use`` are open before serving. Pure.

    An eighth of the limit (at least 16) is kept for what the server opens
    besides connections (goal files, the status cache, logs, the event loop);
    of the connections, a sixteenth (at least 8) is kept from event streams
    for ``/healthz``, ``/status`` and the page's requests.
    """
    files = max(16, limit // 8)
    connections = max(limit - in_use - files, 2)
    streams = max(connections - max(8, limit // 16), 1)
    return DescriptorBudget(connections=connections, streams=streams)


def open_descriptors() -> int:
    """How many descriptors this process holds now (16 when /proc cannot say)."""
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return 16


def raise_descriptor_limit() -> int:
    """Raise this process's soft RLIMIT_NOFILE to its hard limit; the limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 16)
    if soft < want:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
            soft = want
    return soft


def _listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named, not 0: accepted sockets inherit it, and asyncio sets TCP_NODELAY only
    # on those that say TCP. Without it a small reply's body waited for the ACK of its headers
    # (Nagle against delayed ACKs): 40 ms a request.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # Accepted connections inherit these on Linux: a vanished peer is noticed in ~25 s.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        for name, value in _KEEPALIVE:
            with contextlib.suppress(AttributeError, OSError):
                sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, name), value)
        with contextlib.suppress(AttributeError, OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, TCP_USER_TIMEOUT_MS)
        sock.bind((host, port))
        sock.listen(BACKLOG)
    except OSError as e:
        sock.close()
        raise UsageError(
            f"cannot listen on {host}:{port}: {e.strerror}", hint="choose another --port"
        ) from e
    return sock


class HttpServer:
    """A bound status server; :meth:`serve_forever` serves until :meth:`shutdown` or a signal."""

    def __init__(
        self,
        sock: socket.socket,
        service: StatusService,
        *,
        token: str | None,
        extra_hosts: Iterable[str] = (),
        request_timeout_s: float = REQUEST_TIMEOUT_S,
        grace_s: float = GRACE_S,
        budget: DescriptorBudget | None = None,
    ) -> None:
        self.socket = sock
        self.service = service
        self.token = token
        host, port = sock.getsockname()[:2]
        self.server_address: tuple[str, int] = (str(host), int(port))
        budget = budget or descriptor_budget(raise_descriptor_limit(), open_descriptors())
        self.budget = budget
        app = build_app(
            service,
            token=token,
            allowed_hosts=allowed_hosts(host, port, extra_hosts),
            max_streams=budget.streams,
        )
        config = uvicorn.Config(
            app,
            http=_deadline_protocol(request_timeout_s),
            ws="none",
            lifespan="off",
            interface="asgi3",
            log_config=None,
            access_log=False,
            server_header=False,
            proxy_headers=False,
            timeout_keep_alive=int(KEEP_ALIVE_S),
            timeout_graceful_shutdown=int(grace_s) or 1,
            h11_max_incomplete_event_size=MAX_REQUEST_LINE + MAX_HEADER_BYTES,
            backlog=BACKLOG,
            limit_concurrency=budget.connections,
        )
        self._uvicorn = _Uvicorn(config, service.feed)
        self._done = threading.Event()
        self._started = threading.Event()
        self._loop_error_at = -LOOP_ERROR_EVERY_S

    def handle_signal(self, signum: int, _frame: FrameType | None = None) -> None:
        """Record a stop request: the first stops gracefully, a second SIGINT at once."""
        if self._uvicorn.should_exit and signum == signal.SIGINT:
            self._uvicorn.force_exit = True
        self._uvicorn.should_exit = True

    def serve_forever(self) -> None:
        """Serve in this thread until :meth:`shutdown` or SIGINT/SIGTERM (in the main thread)."""
        handlers: dict[int, Any] = {}
        if threading.current_thread() is threading.main_thread():
            handlers = {
                signal.SIGTERM: signal.signal(signal.SIGTERM, self.handle_signal),
                signal.SIGINT: process.own_sigint(self.handle_signal),
            }
        try:
            asyncio.run(self._serve())
        finally:
            for signum, handler in handlers.items():
                signal.signal(signum, handler)
            self._done.set()

    async def _serve(self) -> None:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(self._loop_error)
        self.service.feed.attach(loop)
        self._started.set()
        await self._uvicorn.serve(sockets=[self.socket])

    def _loop_error(self, _loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        """One log line a minute for the event loop's own errors (asyncio's are tracebacks).

        Out of descriptors, asyncio fails every accept and retries each second
        (the connections wait in the backlog); a traceback per second said
        nothing /healthz does not.
        """
        now = time.monotonic()
        if now - self._loop_error_at < LOOP_ERROR_EVERY_S:
            return
        self._loop_error_at = now
        error = context.get("exception")
        with contextlib.suppress(Exception):  # no descriptors may mean no log line either
            log.warning("http_loop_error", message=context.get("message"), error=repr(error))

    def shutdown(self) -> None:
        """Stop serving (from another thread) and wait until :meth:`serve_forever` returned."""
        self._uvicorn.should_exit = True
        if self._started.is_set():
            self._done.wait()

    def server_close(self) -> None:
        """Stop the refresher and close the socket. Idempotent."""
        self.service.stop()
        self.socket.close()


def make_server(
    layout: Layout,
    *,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    token: str | None = None,
    ttl_s: float = SERVE_TTL_S,
    refresh_interval_s: float = SERVE_REFRESH_S,
    actions: ActionCalls | None = None,
    request_timeout_s: float = REQUEST_TIMEOUT_S,
    allowed_hosts: Iterable[str] = (),
    grace_s: float = GRACE_S,
) -> HttpServer:
    """A bound (not yet serving) status server; ``port`` 0 picks a free port.

    ``actions``: the calls the dashboard's actions make, which the API hands in
    (``loopx.api._serve.action_calls``); without them the server is read-only.

    Raises:
        InsecureBindError: a non-loopback host without a token.
        ActionsNeedTokenError: ``actions`` without a token.
        UsageError: the address cannot be bound.

    """
    check_bind(host, token, actions=actions is not None)
    limit = raise_descriptor_limit()
    service = StatusService(
        layout, ttl_s=ttl_s, refresh_interval_s=refresh_interval_s, actions=actions
    )
    sock = _listen(host, port)
    try:
        service.start()
    except BaseException:
        sock.close()
        raise
    return HttpServer(
        sock,
        service,
        token=token or None,
        extra_hosts=allowed_hosts,
        request_timeout_s=request_timeout_s,
        grace_s=grace_s,
        budget=descriptor_budget(limit, open_descriptors()),
    )


def serve(server: HttpServer) -> None:
    """Serve until shut down (``server.shutdown()`` from another thread, or a signal); then close."""
    try:
        server.serve_forever()
    finally:
        server.server_close()
