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
health. Event streams are capped (:class:`~loopx.web.events.StreamSlots`): past
the cap a new stream is a 503, so streams never take the descriptors that
``/healthz`` and ``/status`` need. Actions (``POST /api/goals/<id>/<action>``)
are in :mod:`loopx.web.routes_actions`.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from http import HTTPStatus
from importlib import resources
from typing import Any, Final

from pydantic import BaseModel
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from loopx.errors import LoopxError
from loopx.ids import is_valid_goal_id
from loopx.log import get_logger
from loopx.model import Record, utcnow
from loopx.registry.model import Goal
from loopx.status.documents import (
    ErrorReply,
    Health,
    goal_detail,
    goal_page,
    goal_turns,
    health,
    status_page,
)
from loopx.status.sources import read_fleet
from loopx.status.view import Actor, GoalStatusView
from loopx.turn.livetail import read_live
from loopx.web import dashboard
from loopx.web.actions import read_audit
from loopx.web.bind import host_allowed
from loopx.web.events import StreamSlots
from loopx.web.metrics import render_metrics
from loopx.web.service import Snapshot, StatusService
from loopx.web.worktrees import WorktreeStates, done_worktree_goals

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


def dumps(doc: BaseModel) -> bytes:
    """A reply body: compact JSON and a newline."""
    return doc.model_dump_json().encode() + b"\n"


def json_reply(
    doc: BaseModel, status: int = HTTPStatus.OK, headers: dict[str, str] | None = None
) -> Response:
    """``doc`` as an ``application/json`` reply."""
    return Response(dumps(doc), status, headers, media_type="application/json")


def error_reply(
    status: HTTPStatus, message: str, hint: str | None = None, headers: dict[str, str] | None = None
) -> Response:
    """An :class:`ErrorReply`."""
    return json_reply(ErrorReply(error=message, status=status.value, hint=hint), status, headers)


def authorized(token: str | None, header: str | None) -> bool:
    """Whether an ``Authorization`` header carries the bearer ``token`` (always, without one)."""
    if not token:
        return True
    return hmac.compare_digest((header or "").encode(), f"Bearer {token}".encode())


def unauthorized() -> Response:
    """The 401 a request without the right token gets."""
    return error_reply(
        HTTPStatus.UNAUTHORIZED,
        "missing or wrong bearer token",
        hint="open the URL `loopx serve` printed (it carries the token), or send "
        "`Authorization: Bearer TOKEN`",
        headers={"WWW-Authenticate": 'Bearer realm="loopx"'},
    )


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


def not_allowed() -> Response:
    """405: only GET and HEAD (POST on the action routes)."""
    return error_reply(
        HTTPStatus.METHOD_NOT_ALLOWED,
        "only GET is allowed here (POST only on /api/goals/<id>/<action>, /api/bulk/<action> "
        "and /api/answers)",
        headers={"Allow": "GET, HEAD", "Connection": "close"},
    )


# --- helpers -------------------------------------------------------------------------------------


def _number(request: Request, name: str, default: int, top: int) -> int:
    raw = request.query_params.get(name, str(default))
    if not raw.isdigit():
        raise ValueError(f"{name} must be a non-negative integer")
    return min(int(raw), top)


def _actor(request: Request) -> Actor | None:
    actor = request.query_params.get("actor")
    if actor not in (None, *Actor):
        raise ValueError("actor must be human, agent or none")
    return Actor(actor) if actor is not None else None


def _query(request: Request) -> dict[str, list[str]]:
    query: dict[str, list[str]] = {}
    for key, value in request.query_params.multi_items():
        query.setdefault(key, []).append(value)
    return query


def _service(request: Request) -> StatusService:
    service: StatusService = request.app.state.service
    return service


def handled(endpoint: Callable[[Request], Response]) -> Callable[[Request], Response]:
    """Map a bad query (400) and a failing root (503) to JSON errors."""

    def run(request: Request) -> Response:
        try:
            return endpoint(request)
        except ValueError as e:
            return error_reply(HTTPStatus.BAD_REQUEST, str(e))
        except (LoopxError, OSError) as e:
            return error_reply(
                HTTPStatus.SERVICE_UNAVAILABLE,
                f"the root cannot be read now: {e}",
                hint="retry shortly; /healthz says whether the server can refresh",
            )

    run.__name__ = endpoint.__name__
    run.__doc__ = endpoint.__doc__
    return run


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
    service = _service(request)
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
    offset, limit = _number(request, "offset", 0, 10**9), _number(request, "limit", 100, MAX_PAGE)
    actor = _actor(request)
    body = _service(request).cached(
        f"status:{offset}:{limit}:{actor}",
        lambda s: dumps(status_page(s.projection, offset=offset, limit=limit, actor=actor)),
    )
    return Response(body, media_type="application/json")


@handled
def goals(request: Request) -> Response:
    """``/goals``: one compact row per goal, a page of them."""
    offset, limit = _number(request, "offset", 0, 10**9), _number(request, "limit", 100, MAX_PAGE)
    actor = _actor(request)
    body = _service(request).cached(
        f"goals:{offset}:{limit}:{actor}",
        lambda s: dumps(goal_page(s.projection, offset=offset, limit=limit, actor=actor)),
    )
    return Response(body, media_type="application/json")


def _known(request: Request) -> str | None:
    goal_id: str = request.path_params["goal_id"]
    snap = _service(request).snapshot()
    return goal_id if is_valid_goal_id(goal_id) and goal_id in snap.by_id else None


def _no_goal(request: Request) -> Response:
    return error_reply(
        HTTPStatus.NOT_FOUND,
        f"no goal {request.path_params['goal_id']!r} in the status projection",
        hint="list the goals at /goals",
    )


@handled
def goal(request: Request) -> Response:
    """``/goals/<id>``: one goal's view."""
    goal_id = _known(request)
    if goal_id is None:
        return _no_goal(request)
    snap = _service(request).snapshot()
    return json_reply(goal_detail(snap.projection.goals[snap.by_id[goal_id]]))


@handled
def turns(request: Request) -> Response:
    """``/goals/<id>/turns``: the newest history lines."""
    goal_id = _known(request)
    if goal_id is None:
        return _no_goal(request)
    return json_reply(goal_turns(_service(request).layout, goal_id, TURNS_PAGE))


@handled
def metrics(request: Request) -> Response:
    """``/metrics``: Prometheus text from prometheus_client."""
    service = _service(request)
    snap = service.snapshot()
    fleet, beats = read_fleet(service.layout)
    text = service.with_cache(
        lambda cache: render_metrics(
            cache, snap.projection, fleet=fleet, heartbeats=beats, now=utcnow()
        )
    )
    return Response(text.encode(), media_type="text/plain; version=0.0.4; charset=utf-8")


# --- the dashboard's API -------------------------------------------------------------------------


@handled
def overview(request: Request) -> Response:
    """``/api/overview``."""
    service = _service(request)
    snap = service.snapshot()
    fleet, beats = read_fleet(service.layout)
    head = [g.goal_id for g in dashboard.attention_head(snap.projection) if g.open_gates]
    doc = dashboard.overview(
        snap.projection,
        snap.by_id,
        agents=dashboard.agent_rows(fleet, beats, now=utcnow()),
        seq=service.feed.seq,
        actions=service.actions,
        gates=dashboard.oldest_open_gates(service.layout, head),
    )
    waiting, total = worktree_states(request).merge_waiting(_done_worktree_goals(request, snap))
    return json_reply(
        doc.model_copy(update={"merge_waiting": waiting, "merge_waiting_total": total})
    )


def worktree_states(request: Request) -> WorktreeStates:
    """The server's worktree states (made at the first ask)."""
    states: WorktreeStates | None = getattr(request.app.state, "worktrees", None)
    if states is None:
        states = request.app.state.worktrees = WorktreeStates(_service(request).layout)
    return states


def _done_worktree_goals(
    request: Request, snap: Snapshot
) -> list[tuple[Goal, GoalStatusView | None]]:
    """The done worktree goals of ``snap``: one pass over the goals per snapshot generation."""
    kept = getattr(request.app.state, "done_worktree_goals", None)
    if kept is not None and kept[0] == snap.generation:
        found: list[tuple[Goal, GoalStatusView | None]] = kept[1]
        return found
    found = done_worktree_goals(snap.projection.goals, _service(request).goal_policy)
    request.app.state.done_worktree_goals = (snap.generation, found)
    return found


@handled
def api_goals(request: Request) -> Response:
    """``/api/goals``: a filtered page of the queue."""
    f = dashboard.parse_filter(_query(request))
    offset = _number(request, "offset", 0, 10**9)
    limit = _number(request, "limit", dashboard.DEFAULT_ROWS, dashboard.MAX_ROWS)
    service = _service(request)
    running = _running(service)
    now_running = ",".join(f"{g}={a.turn_key}" for g, a in sorted(running.items()))

    def build(snap: Snapshot) -> bytes:
        goals = dashboard.filtered(snap.projection.goals, f)
        gated = [g.goal_id for g in goals[offset : offset + limit] if g.open_gates]
        gates = dashboard.oldest_open_gates(service.layout, gated)  # a page's states at most
        return dumps(
            dashboard.goals_page(goals, f, offset=offset, limit=limit, running=running, gates=gates)
        )

    body = service.cached(f"api-goals:{offset}:{limit}:{f.model_dump_json()}:{now_running}", build)
    return Response(body, media_type="application/json")


@handled
def api_goal(request: Request) -> Response:
    """``/api/goals/<id>``: policy, state, view and recent turns."""
    goal_id = _known(request)
    if goal_id is None:
        return _no_goal(request)
    service = _service(request)
    snap = service.snapshot()
    view = snap.projection.goals[snap.by_id[goal_id]]
    policy = service.goal_policy(goal_id)
    tree = None
    if policy is not None and policy.worktree is not None:
        tree = worktree_states(request).state(policy, view).panel
    doc = dashboard.goal_detail(
        service.layout, view, policy, actions=service.actions, worktree=tree
    )
    return json_reply(doc.model_copy(update={"running": _running(service).get(goal_id)}))


def _running(service: StatusService) -> dict[str, dashboard.AgentRow]:
    fleet, beats = read_fleet(service.layout)
    return dashboard.running_turns(dashboard.agent_rows(fleet, beats, now=utcnow()))


@handled
def api_live(request: Request) -> Response:
    """``/api/goals/<id>/live``: the running host's output; 204 when none runs."""
    goal_id = _known(request)
    if goal_id is None:
        return _no_goal(request)
    live = read_live(_service(request).layout, goal_id)
    return Response(status_code=HTTPStatus.NO_CONTENT) if live is None else json_reply(live)


@handled
def api_run(request: Request) -> Response:
    """``/api/goals/<id>/runs/<seq>``: a turn's markdown report."""
    goal_id = _known(request)
    if goal_id is None:
        return _no_goal(request)
    log_doc = dashboard.run_log(_service(request).layout, goal_id, request.path_params["seq"])
    if log_doc is None:
        return error_reply(
            HTTPStatus.NOT_FOUND, f"goal {goal_id!r} has no run log {request.path_params['seq']}"
        )
    return json_reply(log_doc)


@handled
def audit(request: Request) -> Response:
    """``/api/audit?limit=100``: who did what, when, applied or refused; newest first."""
    limit = _number(request, "limit", 100, 1000)
    return json_reply(read_audit(_service(request).layout, limit))


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
    service = _service(request)
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
    from loopx.web.routes_actions import (  # noqa: PLC0415 - routes of their own module
        post_action,
        post_answers,
        post_bulk,
    )
    from loopx.web.routes_panels import (  # noqa: PLC0415 - routes of their own module
        api_latest_run,
        api_timeline,
    )
    from loopx.web.routes_worktree import (  # noqa: PLC0415 - routes of their own module
        api_worktree,
    )

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
