"""The HTTP routes of `loopx serve`, as a Starlette application over one :class:`StatusService`.

Every request first passes :class:`Guard`: a ``Host`` not on the allow-list
is a 421 on every route (DNS rebinding), oversized request lines and
headers are refused before any work, a GET may carry no body, and methods
other than GET, HEAD and POST are a 405. ``/`` and ``/static/<file>`` hold
no data and are served without the token (the page asks for it); every
other GET needs it when the server has one. Replies are JSON except
``/metrics`` (Prometheus text), ``/events`` (Server-Sent Events) and the
static files. ``/healthz`` answers without the token too, with ``{"ok": ...}``
only (for a systemd or load-balancer probe); with the token it is the full
health. Event streams are capped (:class:`~loopx.web.changefeed.StreamSlots`): past
the cap a new stream is a 503, so streams never take the descriptors that
``/healthz`` and ``/status`` need. Actions (``POST /api/goals/<id>/<action>``)
are in :mod:`loopx.web.routes_actions`.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from http import HTTPStatus
from importlib import resources
from typing import Any, Final

from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from loopx.log import get_logger
from loopx.model import Record, utcnow
from loopx.status.documents import (
    Health,
    goal_detail,
    goal_page,
    goal_turns,
    health,
    status_page,
)
from loopx.status.sources import read_fleet
from loopx.web.bind import host_allowed
from loopx.web.changefeed import StreamSlots
from loopx.web.metrics import render_metrics
from loopx.web.replies import (
    authorized,
    dumps,
    error_reply,
    handled,
    json_reply,
    known_goal,
    no_such_goal,
    not_allowed,
    query_actor,
    query_number,
    service_of,
    unauthorized,
)
from loopx.web.routes_actions import post_action, post_answers, post_bulk
from loopx.web.routes_dashboard import api_goal, api_goals, api_live, api_run, audit, overview
from loopx.web.routes_panels import api_latest_run, api_timeline
from loopx.web.routes_worktree import api_worktree
from loopx.web.service import StatusService

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

MAX_REQUEST_LINE: Final = 4096
MAX_HEADERS: Final = 32
MAX_HEADER_BYTES: Final = 8192
DEFAULT_PAGE: Final = 100
MAX_PAGE: Final = 10_000
TURNS_PAGE: Final = 50
STREAM_MAX_S: Final = 600.0  # a stream ends after this; the page reconnects
KEEPALIVE_S: Final = 15.0
SEND_TIMEOUT_S: Final = 10.0  # a stream whose client takes longer to take a frame is dropped
_ASSETS: Final = {
    "index.html": "text/html; charset=utf-8",
    "dashboard.css": "text/css; charset=utf-8",
    "dashboard.js": "text/javascript; charset=utf-8",
    "favicon.svg": "image/svg+xml",
}
CSP: Final = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
# /healthz answers these with {"ok": ...} only: a probe holds no token.
_PUBLIC_PATHS: Final = frozenset({"/", "/healthz", *(f"/static/{name}" for name in _ASSETS)})
STREAM_RETRY_AFTER_S: Final = 10
_ALLOWED_METHODS: Final = frozenset({"GET", "HEAD", "POST"})

log = get_logger(__name__)


class Guard:
    """The checks every request passes before routing; security headers on every reply."""

    def __init__(
        self, app: ASGIApp, *, token: str | None, allowed_hosts: frozenset[str] | None
    ) -> None:
        self.app = app
        self.token = token
        self.allowed_hosts = allowed_hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Refuse the request, or pass it on with the headers every reply carries."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = self._refusal(scope)
        if refusal is not None:
            await refusal(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                names = {k.lower() for k, _ in message.get("headers", [])}
                extra = [(b"cache-control", b"no-store"), (b"x-content-type-options", b"nosniff")]
                message["headers"] = list(message.get("headers", [])) + [
                    (k, v) for k, v in extra if k not in names
                ]
            await send(message)

        await self.app(scope, receive, with_headers)

    def _refusal(self, scope: Scope) -> Response | None:  # noqa: PLR0911 - one return per check, in order
        headers: list[tuple[bytes, bytes]] = scope["headers"]
        by_name = {k.decode("latin-1"): v.decode("latin-1") for k, v in headers}
        if not host_allowed(by_name.get("host"), self.allowed_hosts):
            return error_reply(
                HTTPStatus.MISDIRECTED_REQUEST,
                f"this server does not answer for Host {by_name.get('host', '')!r}",
                hint="open it by the address `loopx serve` printed; behind a reverse proxy "
                "pass --allowed-host NAME",
            )
        line = len(scope.get("raw_path", b"")) + len(scope.get("query_string", b""))
        if line > MAX_REQUEST_LINE:
            return error_reply(HTTPStatus.REQUEST_URI_TOO_LONG, "the request line is too long")
        if len(headers) > MAX_HEADERS or sum(len(k) + len(v) for k, v in headers) > (
            MAX_HEADER_BYTES
        ):
            return error_reply(
                HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE,
                f"at most {MAX_HEADERS} headers of {MAX_HEADER_BYTES} bytes in all",
            )
        method = scope["method"]
        if method not in _ALLOWED_METHODS:
            return not_allowed()
        if method != "POST" and (
            by_name.get("content-length", "0") not in ("", "0") or "transfer-encoding" in by_name
        ):
            return error_reply(
                HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "a GET request may carry no body"
            )
        if (
            method != "POST"
            and scope["path"] not in _PUBLIC_PATHS
            and not authorized(self.token, by_name.get("authorization"))
        ):
            return unauthorized()
        return None


# --- helpers -------------------------------------------------------------------------------------


# --- the page and its assets ---------------------------------------------------------------------

_asset_cache: dict[str, bytes] = {}


def _asset(name: str) -> bytes:
    body = _asset_cache.get(name)
    if body is None:
        body = _asset_cache[name] = (
            resources.files("loopx.web").joinpath("static", name).read_bytes()
        )
    return body


def page(request: Request) -> Response:
    """``/`` and ``/static/<file>``: the dashboard, under a strict CSP."""
    name = request.path_params.get("name", "index.html")
    if name not in _ASSETS:
        return error_reply(HTTPStatus.NOT_FOUND, f"no such asset {name!r}")
    headers = {"Content-Security-Policy": CSP, "X-Frame-Options": "DENY"}
    return Response(_asset(name), headers=headers, media_type=_ASSETS[name])


# --- the status API ------------------------------------------------------------------------------


class Liveness(Record):
    """``/healthz`` without the token: whether the server refreshes, and nothing else."""

    ok: bool


@handled
def healthz(request: Request) -> Response:
    """``/healthz``: 200 while the server refreshes; 503 while it cannot.

    Without the token the body is ``{"ok": true}`` (or false) only; with it,
    the full health (goals, degraded, the refresh's error).
    """
    service = service_of(request)
    failure = service.failure
    if not authorized(request.app.state.token, request.headers.get("authorization")):
        status = HTTPStatus.OK if failure is None else HTTPStatus.SERVICE_UNAVAILABLE
        return json_reply(Liveness(ok=failure is None), status)
    snap = service.snapshot()
    if failure is None:
        return json_reply(health(snap.projection))
    doc = Health(
        ok=False,
        checked_at=snap.projection.checked_at,
        goals=snap.projection.counts.total,
        degraded=snap.projection.fleet.degraded,
        refresh_error=f"refreshing the status has failed since {failure.since.isoformat()}: "
        f"{failure.error}",
    )
    return json_reply(doc, HTTPStatus.SERVICE_UNAVAILABLE)


@handled
def status(request: Request) -> Response:
    """``/status``: one page of the status document."""
    offset, limit = (
        query_number(request, "offset", 0, 10**9),
        query_number(request, "limit", 100, MAX_PAGE),
    )
    actor = query_actor(request)
    body = service_of(request).cached(
        f"status:{offset}:{limit}:{actor}",
        lambda s: dumps(status_page(s.projection, offset=offset, limit=limit, actor=actor)),
    )
    return Response(body, media_type="application/json")


@handled
def goals(request: Request) -> Response:
    """``/goals``: one compact row per goal, a page of them."""
    offset, limit = (
        query_number(request, "offset", 0, 10**9),
        query_number(request, "limit", 100, MAX_PAGE),
    )
    actor = query_actor(request)
    body = service_of(request).cached(
        f"goals:{offset}:{limit}:{actor}",
        lambda s: dumps(goal_page(s.projection, offset=offset, limit=limit, actor=actor)),
    )
    return Response(body, media_type="application/json")


@handled
def goal(request: Request) -> Response:
    """``/goals/<id>``: one goal's view."""
    goal_id = known_goal(request)
    if goal_id is None:
        return no_such_goal(request)
    snap = service_of(request).snapshot()
    return json_reply(goal_detail(snap.projection.goals[snap.by_id[goal_id]]))


@handled
def turns(request: Request) -> Response:
    """``/goals/<id>/turns``: the newest history lines."""
    goal_id = known_goal(request)
    if goal_id is None:
        return no_such_goal(request)
    return json_reply(goal_turns(service_of(request).layout, goal_id, TURNS_PAGE))


@handled
def metrics(request: Request) -> Response:
    """``/metrics``: Prometheus text from prometheus_client."""
    service = service_of(request)
    snap = service.snapshot()
    fleet, beats = read_fleet(service.layout)
    text = service.with_cache(
        lambda cache: render_metrics(
            cache, snap.projection, fleet=fleet, heartbeats=beats, now=utcnow()
        )
    )
    return Response(text.encode(), media_type="text/plain; version=0.0.4; charset=utf-8")


# --- the dashboard's API -------------------------------------------------------------------------


class _CountedStream(EventSourceResponse):
    """An event stream that gives its slot back however it ends (closed, dropped, shut down)."""

    def __init__(self, *args: Any, slots: StreamSlots, **kwargs: Any) -> None:  # noqa: ANN401 - EventSourceResponse's own
        super().__init__(*args, **kwargs)
        self._slots = slots

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Stream, then release the slot."""
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._slots.release()


async def events(request: Request) -> Response:
    """``/events``: a ``hello`` frame, then a frame per change, keep-alive comments between.

    Past the server's stream cap a new stream is a 503 with ``Retry-After``.
    """
    service = service_of(request)
    if request.method == "HEAD":
        return Response(b"", media_type="text/event-stream; charset=utf-8")
    slots: StreamSlots = request.app.state.streams
    if not slots.take():
        return error_reply(
            HTTPStatus.SERVICE_UNAVAILABLE,
            f"{slots.open} event streams are open, the most this server keeps "
            "below its descriptor limit",
            hint="close other dashboard tabs, or raise the limit (LimitNOFILE= in the unit)",
            headers={"Retry-After": str(STREAM_RETRY_AFTER_S)},
        )
    feed = service.feed

    async def frames() -> AsyncIterator[ServerSentEvent]:
        seq = feed.seq
        yield ServerSentEvent(
            data=json.dumps({"seq": seq}), event="hello", id=str(seq), retry=2000, sep="\n"
        )
        ends = _loop_time() + STREAM_MAX_S
        while not feed.closed and _loop_time() < ends:
            for event in await feed.wait_after(seq, KEEPALIVE_S):
                yield ServerSentEvent(
                    data=event.model_dump_json(), event="change", id=str(event.seq), sep="\n"
                )
                seq = event.seq

    return _CountedStream(
        frames(),
        slots=slots,
        ping=KEEPALIVE_S,
        sep="\n",  # the page splits frames at a blank line, as the SSE spec allows
        ping_message_factory=lambda: ServerSentEvent(comment="keep-alive", sep="\n"),
        send_timeout=SEND_TIMEOUT_S,
        headers={"X-Accel-Buffering": "no"},  # nginx: pass events through unbuffered
    )


def _loop_time() -> float:
    import asyncio  # noqa: PLC0415 - the running loop's clock, asked only inside a stream

    return asyncio.get_running_loop().time()


# --- the application -----------------------------------------------------------------------------


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)  # noqa: S101 - registered for HTTPException only
    get = request.method in {"GET", "HEAD"}  # a GET meets a 405 only on a POST-only route
    if exc.status_code == HTTPStatus.METHOD_NOT_ALLOWED and not get:
        return not_allowed()
    if exc.status_code in {HTTPStatus.NOT_FOUND, HTTPStatus.METHOD_NOT_ALLOWED}:
        return error_reply(
            HTTPStatus.NOT_FOUND, f"no such resource {request.url.path!r}", hint="try /status"
        )
    return error_reply(HTTPStatus(exc.status_code), exc.detail)


def build_app(
    service: StatusService,
    *,
    token: str | None,
    allowed_hosts: frozenset[str] | None,
    max_streams: int = 10_000,
) -> ASGIApp:
    """The whole application: :class:`Guard` around the routes of ``service``.

    ``max_streams``: how many ``/events`` streams may be open at once.
    """
    routes = [
        Route("/", page, methods=["GET"]),
        Route("/static/{name}", page, methods=["GET"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/status", status, methods=["GET"]),
        Route("/goals", goals, methods=["GET"]),
        Route("/goals/{goal_id}", goal, methods=["GET"]),
        Route("/goals/{goal_id}/turns", turns, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        Route("/events", events, methods=["GET"]),
        Route("/api/overview", overview, methods=["GET"]),
        Route("/api/audit", audit, methods=["GET"]),
        Route("/api/timeline", api_timeline, methods=["GET"]),
        Route("/api/goals", api_goals, methods=["GET"]),
        Route("/api/goals/{goal_id}", api_goal, methods=["GET"]),
        Route("/api/goals/{goal_id}/live", api_live, methods=["GET"]),
        Route("/api/goals/{goal_id}/runs/latest", api_latest_run, methods=["GET"]),
        Route("/api/goals/{goal_id}/runs/{seq:int}", api_run, methods=["GET"]),
        Route("/api/goals/{goal_id}/worktree", api_worktree, methods=["GET"]),
        Route("/api/goals/{goal_id}/{action}", post_action, methods=["POST"]),
        Route("/api/answers", post_answers, methods=["POST"]),
        Route("/api/bulk/{action}", post_bulk, methods=["POST"]),
    ]
    app = Starlette(routes=routes, exception_handlers={HTTPException: _http_error})
    app.state.service = service
    app.state.token = token
    app.state.streams = StreamSlots(max_streams)
    return Guard(app, token=token, allowed_hosts=allowed_hosts)
