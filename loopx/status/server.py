"""The HTTP status server: the dashboard, the attention queue and metrics.

Loopback by default; a non-loopback bind needs a bearer token. Requests are
small and bounded (request line, header count and size, no body but an
action's small JSON), the whole request must arrive within
``request_timeout_s`` (not per read: a client trickling one byte at a time
is cut off), and every reply is JSON except ``/metrics`` (Prometheus text),
``/events`` (Server-Sent Events) and the dashboard's static files
(:mod:`loopx.status.web`). Actions (answer a gate, pause, resume, done) are
off unless the server is started with them and a token.

The stdlib ``ThreadingHTTPServer`` is kept rather than adding an ASGI server:
the whole-request deadline is a reader wrapper (:class:`~loopx.status.deadline.DeadlineReader`), a
Server-Sent Events stream is a thread waiting on a condition (at most 32 of
them), and nothing is imported at CLI start that ``loopx status`` does not
already need.
A background thread refreshes the cached projection every
``refresh_interval_s`` (a no-op while a supervisor keeps it fresh), and the
serialised replies are cached per generation, so a request costs a lookup
and a socket write, not a projection.
"""

from __future__ import annotations

import hmac
import io
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Final
from urllib.parse import parse_qs, unquote, urlsplit

from pydantic import BaseModel

from loopx.errors import LoopxError, UsageError
from loopx.ids import is_valid_goal_id
from loopx.log import get_logger
from loopx.model import utcnow
from loopx.registry.model import Goal
from loopx.root import Layout
from loopx.status import web
from loopx.status.bind import check_bind
from loopx.status.cache import StatusCache
from loopx.status.deadline import DeadlineReader
from loopx.status.documents import (
    ErrorReply,
    goal_detail,
    goal_page,
    goal_turns,
    health,
    status_page,
)
from loopx.status.events import ChangeFeed, change_event
from loopx.status.metrics import render_metrics
from loopx.status.serving import DEFAULT_HOST, DEFAULT_PORT, SERVE_REFRESH_S, SERVE_TTL_S
from loopx.status.sources import read_fleet
from loopx.status.view import Actor, StatusProjection

MAX_REQUEST_LINE: Final = 4096
MAX_HEADERS: Final = 32
MAX_HEADER_BYTES: Final = 8192
SOCKET_TIMEOUT_S: Final = 10.0
REQUEST_TIMEOUT_S: Final = 10.0  # the whole request (line, headers, body), however it trickles
DEFAULT_PAGE: Final = 100
MAX_PAGE: Final = 10_000
TURNS_PAGE: Final = 50

log = get_logger(__name__)


@dataclass(slots=True)
class _Snapshot:
    generation: tuple[int, str]
    projection: StatusProjection
    by_id: dict[str, int]
    replies: dict[str, bytes] = field(default_factory=dict)


class StatusService:
    """What the handlers read: the cache, refreshed by one thread, and cached replies."""

    def __init__(
        self,
        layout: Layout,
        *,
        ttl_s: float,
        refresh_interval_s: float,
        actions: bool = False,
    ) -> None:
        self.layout = layout
        self.ttl_s = ttl_s
        self.refresh_interval_s = refresh_interval_s
        self.actions = actions
        self.feed = ChangeFeed()
        self._cache = StatusCache(layout)
        self._lock = threading.Lock()
        self._snapshot: _Snapshot | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def refresh_once(self, *, now_please: bool = False) -> None:
        """Refresh the cache (if older than the TTL) and rebuild the snapshot if it changed.

        A refresh that changed goals (or the fleet) publishes a change event
        naming them; one that changed nothing keeps the assembled projection
        and only moves its ``checked_at``, so an idle root costs no re-sort.
        ``now_please`` ignores the TTL (after an action, so the page sees it).
        """
        with self._lock:
            ttl_s = 0.0 if now_please else self.ttl_s
            report = self._cache.refresh(now=utcnow(), ttl_s=ttl_s)
            index = self._cache.index
            if index is None:
                return
            generation = (index.generation, index.writer)
            old = self._snapshot
            if old is not None and old.generation == generation:
                return
            if (
                old is not None
                and report.changed == frozenset()
                and index.fleet == old.projection.fleet
                and index.generated_at == old.projection.generated_at
            ):
                moved = old.projection.model_copy(update={"checked_at": index.checked_at})
                self._snapshot = _Snapshot(generation, moved, old.by_id)
                return
            projection = self._cache.projection()
            if projection is None:
                return
            by_id = {g.goal_id: i for i, g in enumerate(projection.goals)}
            self._snapshot = _Snapshot(generation, projection, by_id)
            if old is not None:
                self.feed.publish(
                    change_event(
                        self.feed.next_seq(),
                        at=index.checked_at,
                        changed=report.changed,
                        counts=projection.counts,
                        fleet=projection.fleet,
                    )
                )

    def goal_policy(self, goal_id: str) -> Goal | None:
        """The registry entry the cache last read for ``goal_id``."""
        with self._lock:
            return self._cache.active.get(goal_id)

    def snapshot(self) -> _Snapshot:
        """The current snapshot (refreshing first if there is none)."""
        snap = self._snapshot
        if snap is None:
            self.refresh_once()
            snap = self._snapshot
        if snap is None:  # pragma: no cover - refresh_once always builds one
            msg = "no status snapshot"
            raise LoopxError(msg)
        return snap

    def start(self) -> None:
        """Start the background refresher."""
        self.refresh_once()
        self._thread = threading.Thread(target=self._loop, name="status-refresh", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the background refresher and end every event stream."""
        self._stop.set()
        self.feed.close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _loop(self) -> None:
        while not self._stop.wait(self.refresh_interval_s):
            try:
                self.refresh_once()
            except (LoopxError, OSError) as e:
                log.warning("status_refresh_failed", error=str(e))

    def metrics_text(self) -> str:
        """``/metrics``, rendered under the lock so the refresher cannot change the cache meanwhile."""
        snap = self.snapshot()
        fleet, beats = read_fleet(self.layout)
        with self._lock:
            return render_metrics(
                self._cache, snap.projection, fleet=fleet, heartbeats=beats, now=utcnow()
            )

    # --- replies ---------------------------------------------------------------------------

    def cached(self, key: str, build: Callable[[_Snapshot], bytes]) -> bytes:
        """A reply body cached per snapshot generation."""
        snap = self.snapshot()
        body = snap.replies.get(key)
        if body is None:
            body = build(snap)
            if len(snap.replies) < 1024:  # noqa: PLR2004 - bound the per-generation cache
                snap.replies[key] = body
        return body


def _dumps(doc: BaseModel) -> bytes:
    return doc.model_dump_json().encode() + b"\n"


def _error_body(status: HTTPStatus, message: str, hint: str | None = None) -> bytes:
    return _dumps(ErrorReply(error=message, status=status.value, hint=hint))


def _page(query: dict[str, list[str]]) -> tuple[int, int, Actor | None]:
    def number(name: str, default: int, top: int) -> int:
        raw = query.get(name, [str(default)])[-1]
        if not raw.isdigit():
            raise ValueError(f"{name} must be a non-negative integer")
        return min(int(raw), top)

    actor = query.get("actor", [None])[-1]
    if actor not in (None, *Actor):
        raise ValueError("actor must be human, agent or none")
    return (
        number("offset", 0, 10**9),
        number("limit", DEFAULT_PAGE, MAX_PAGE),
        Actor(actor) if actor is not None else None,
    )


class StatusHandler(BaseHTTPRequestHandler):
    """One request: bounded in size and time, authenticated when a token is set."""

    server: StatusServer
    raw_requestline: bytes  # set by the stdlib's handle_one_request before parse_request
    protocol_version = "HTTP/1.1"
    server_version = "loopx"
    sys_version = ""
    timeout = SOCKET_TIMEOUT_S  # StreamRequestHandler applies it to the socket before reading
    # Headers and body go out in two writes; with Nagle on, a keep-alive client (every browser)
    # waits for its delayed ACK, 40 ms per reply.
    disable_nagle_algorithm = True

    def setup(self) -> None:
        """Wrap the socket's read side in the request deadline."""
        super().setup()
        self._reader = DeadlineReader(self.connection, SOCKET_TIMEOUT_S)
        self.rfile = io.BufferedReader(self._reader)

    def handle_one_request(self) -> None:
        """Give the next request (line, headers, body) ``request_timeout_s`` to arrive."""
        self._reader.deadline = time.monotonic() + self.server.request_timeout_s
        super().handle_one_request()

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib's name
        """Log through structlog at debug level instead of stderr lines."""
        log.debug("http_request", client=self.client_address[0], line=format % args)

    # The stdlib reads headers with its own limits (100 headers, 64 KiB per
    # line); ours are tighter and checked here before any work is done.
    def parse_request(self) -> bool:
        """Parse, then enforce the size limits and the token."""
        if len(self.raw_requestline) > MAX_REQUEST_LINE:
            self.send_error(HTTPStatus.REQUEST_URI_TOO_LONG)
            return False
        if not super().parse_request():
            return False
        size = sum(len(k) + len(v) for k, v in self.headers.items())
        if len(self.headers) > MAX_HEADERS or size > MAX_HEADER_BYTES:
            self.close_connection = True
            self.send_error(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE)
            return False
        if self.command not in ("GET", "HEAD"):
            return True  # POST: web.do_post reads a bounded body; others: 405 without reading
        if self.headers.get("Content-Length", "0") not in ("", "0") or self.headers.get(
            "Transfer-Encoding"
        ):
            self.close_connection = True
            self.send_error(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "request bodies are not accepted")
            return False
        return True

    def _authorized(self) -> bool:
        token = self.server.token
        if not token:
            return True
        given = self.headers.get("Authorization", "")
        expected = f"Bearer {token}"
        return hmac.compare_digest(given.encode(), expected.encode())

    def _reply(
        self,
        status: HTTPStatus,
        body: bytes,
        content_type: str = "application/json",
        headers: dict[str, str] | None = None,
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _error(self, status: HTTPStatus, message: str, hint: str | None = None) -> None:
        self._reply(status, _error_body(status, message, hint))

    def _unauthorized(self) -> None:
        self.send_response(HTTPStatus.UNAUTHORIZED)
        body = _error_body(HTTPStatus.UNAUTHORIZED, "missing or wrong bearer token")
        self.send_header("WWW-Authenticate", 'Bearer realm="loopx"')
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _not_allowed(self) -> None:
        self.close_connection = True
        self.send_response(HTTPStatus.METHOD_NOT_ALLOWED)
        body = _error_body(HTTPStatus.METHOD_NOT_ALLOWED, "only GET is allowed")
        self.send_header("Allow", "GET, HEAD")
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_TRACE = do_CONNECT = _not_allowed  # noqa: N815

    def do_POST(self) -> None:
        """An action (``/api/goals/<id>/<action>``); any other POST is a 405."""
        if not web.do_post(self):
            self._not_allowed()

    def do_HEAD(self) -> None:
        """Same as GET without the body."""
        self.do_GET()

    def do_GET(self) -> None:
        """Route a GET."""
        url = urlsplit(self.path)
        parts = [unquote(p) for p in url.path.split("/") if p]
        if web.serve_static(self, parts):  # the page and its assets hold no data: no token
            return
        if not self._authorized():
            self._unauthorized()
            return
        try:
            query = parse_qs(url.query, max_num_fields=10)
            if not web.route_get(self, parts, query):
                self._route(parts, query)
        except ValueError as e:
            self._error(HTTPStatus.BAD_REQUEST, str(e))
        except (LoopxError, OSError) as e:
            log.warning("http_error", path=url.path, error=str(e))
            self._error(HTTPStatus.SERVICE_UNAVAILABLE, str(e))

    def _route(self, parts: list[str], query: dict[str, list[str]]) -> None:
        service = self.server.service
        if parts == ["healthz"]:
            snap = service.snapshot()
            self._reply(HTTPStatus.OK, _dumps(health(snap.projection)))
        elif parts == ["status"]:
            offset, limit, actor = _page(query)
            body = service.cached(
                f"status:{offset}:{limit}:{actor}",
                lambda s: _dumps(
                    status_page(s.projection, offset=offset, limit=limit, actor=actor)
                ),
            )
            self._reply(HTTPStatus.OK, body)
        elif parts == ["goals"]:
            offset, limit, actor = _page(query)
            body = service.cached(
                f"goals:{offset}:{limit}:{actor}",
                lambda s: _dumps(goal_page(s.projection, offset=offset, limit=limit, actor=actor)),
            )
            self._reply(HTTPStatus.OK, body)
        elif len(parts) in (2, 3) and parts[0] == "goals":
            goal_id = parts[1]
            snap = service.snapshot()
            if not is_valid_goal_id(goal_id) or goal_id not in snap.by_id:
                self._error(HTTPStatus.NOT_FOUND, f"no goal {goal_id!r} in the status projection")
            elif len(parts) == 2:  # noqa: PLR2004 - /goals/<id>
                view = snap.projection.goals[snap.by_id[goal_id]]
                self._reply(HTTPStatus.OK, _dumps(goal_detail(view)))
            elif parts[2] == "turns":
                turns = goal_turns(service.layout, goal_id, TURNS_PAGE)
                self._reply(HTTPStatus.OK, _dumps(turns))
            else:
                self._error(HTTPStatus.NOT_FOUND, f"no such resource {self.path!r}")
        elif parts == ["metrics"]:
            text = service.metrics_text()
            self._reply(HTTPStatus.OK, text.encode(), "text/plain; version=0.0.4; charset=utf-8")
        else:
            self._error(HTTPStatus.NOT_FOUND, f"no such resource {self.path!r}; try /status")


class StatusServer(ThreadingHTTPServer):
    """A threading HTTP server bound to one root's status."""

    daemon_threads = True
    request_queue_size = 128

    def __init__(
        self,
        address: tuple[str, int],
        service: StatusService,
        token: str | None,
        *,
        request_timeout_s: float = REQUEST_TIMEOUT_S,
    ) -> None:
        self.service = service
        self.token = token or None
        self.request_timeout_s = request_timeout_s
        self.streams = web.StreamSlots()
        host = address[0]
        if ":" in host:
            self.address_family = socket.AF_INET6
        super().__init__(address, StatusHandler)

    def handle_error(self, request: object, client_address: object) -> None:  # noqa: ARG002
        """Log a failed request (a client that vanished, a bug) instead of printing to stderr."""
        log.warning("http_request_failed", client=str(client_address), exc_info=True)  # noqa: LOG014 - the stdlib calls this inside its except


def make_server(
    layout: Layout,
    *,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    token: str | None = None,
    ttl_s: float = SERVE_TTL_S,
    refresh_interval_s: float = SERVE_REFRESH_S,
    actions: bool = False,
    request_timeout_s: float = REQUEST_TIMEOUT_S,
) -> StatusServer:
    """A bound (not yet serving) status server; ``port`` 0 picks a free port.

    Raises:
        InsecureBindError: a non-loopback host without a token.
        ActionsNeedTokenError: ``actions`` without a token.
        UsageError: the address cannot be bound.

    """
    check_bind(host, token, actions=actions)
    service = StatusService(
        layout, ttl_s=ttl_s, refresh_interval_s=refresh_interval_s, actions=actions
    )
    try:
        server = StatusServer((host, port), service, token, request_timeout_s=request_timeout_s)
    except OSError as e:
        raise UsageError(
            f"cannot listen on {host}:{port}: {e.strerror}", hint="choose another --port"
        ) from e
    service.start()
    return server


def serve(server: StatusServer) -> None:
    """Serve until shut down (``server.shutdown()`` from another thread, or Ctrl-C)."""
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.service.stop()
        server.server_close()
