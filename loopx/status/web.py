"""The dashboard's routes on the status server: page, assets, JSON API, live events, actions.

``/`` and ``/static/<file>`` hold no data and are served without the token
(the page asks for it); every other route needs it when the server has one.
``/events`` streams :class:`~loopx.status.events.ChangeEvent` frames as
Server-Sent Events. ``POST /api/goals/<id>/<action>`` runs an action when the
server was started with them: token header required (a cookie alone never
authorises), cross-site requests refused, every attempt audited.
"""

from __future__ import annotations

import json
import threading
import time
from http import HTTPStatus
from importlib import resources
from typing import TYPE_CHECKING, Final

from pydantic import ValidationError

from loopx.errors import GoalNotFoundError, LoopxError
from loopx.ids import is_valid_goal_id
from loopx.model import utcnow
from loopx.status import dashboard
from loopx.status.actions import (
    MAX_ACTION_BODY,
    Action,
    ActionRequest,
    AuditRecord,
    Outcome,
    cross_site_reason,
    perform,
    record_audit,
)
from loopx.status.dashboard import dumps
from loopx.status.events import sse_frame
from loopx.status.livetail import read_live
from loopx.status.sources import read_fleet

if TYPE_CHECKING:
    from loopx.status.server import StatusHandler

MAX_STREAMS: Final = 32  # each stream holds a thread; past this /events answers 503
STREAM_MAX_S: Final = 600.0  # a stream ends after this; EventSource-style clients reconnect
KEEPALIVE_S: Final = 15.0
_ASSETS: Final = {
    "index.html": "text/html; charset=utf-8",
    "dashboard.css": "text/css; charset=utf-8",
    "dashboard.js": "text/javascript; charset=utf-8",
    "favicon.svg": "image/svg+xml",
}
_CSP: Final = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
_asset_cache: dict[str, bytes] = {}


class StreamSlots:
    """A counter of open event streams, bounded by MAX_STREAMS."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.open = 0

    def take(self) -> bool:
        """Take a slot; False when every slot is in use."""
        with self._lock:
            if self.open >= MAX_STREAMS:
                return False
            self.open += 1
            return True

    def give(self) -> None:
        """Give a slot back."""
        with self._lock:
            self.open -= 1


def _asset(name: str) -> bytes:
    body = _asset_cache.get(name)
    if body is None:
        body = _asset_cache[name] = (
            resources.files("loopx.status").joinpath("static", name).read_bytes()
        )
    return body


def serve_static(h: StatusHandler, parts: list[str]) -> bool:
    """Serve the page (``/``) or an asset; False when the path is neither."""
    if parts == []:
        name = "index.html"
    elif len(parts) == 2 and parts[0] == "static" and parts[1] in _ASSETS:  # noqa: PLR2004
        name = parts[1]
    else:
        return False
    headers = {"Content-Security-Policy": _CSP, "X-Frame-Options": "DENY"}
    h._reply(HTTPStatus.OK, _asset(name), _ASSETS[name], headers)  # noqa: SLF001
    return True


def _number(query: dict[str, list[str]], name: str, default: int, top: int) -> int:
    raw = query.get(name, [str(default)])[-1]
    if not raw.isdigit():
        raise ValueError(f"{name} must be a non-negative integer")
    return min(int(raw), top)


def route_get(h: StatusHandler, parts: list[str], query: dict[str, list[str]]) -> bool:
    """Answer ``/api/...`` and ``/events``; False for any other path."""
    service = h.server.service
    if parts == ["events"]:
        if h.command == "HEAD":
            h._reply(HTTPStatus.OK, b"", "text/event-stream; charset=utf-8")  # noqa: SLF001
        else:
            _stream(h)
        return True
    if not parts or parts[0] != "api":
        return False
    if parts == ["api", "overview"]:
        snap = service.snapshot()
        fleet, beats = read_fleet(service.layout)
        doc = dashboard.overview(
            snap.projection,
            snap.by_id,
            agents=dashboard.agent_rows(fleet, beats, now=utcnow()),
            seq=service.feed.seq,
            actions=service.actions,
        )
        h._reply(HTTPStatus.OK, dumps(doc))  # noqa: SLF001
    elif parts == ["api", "goals"]:
        f = dashboard.parse_filter(query)
        offset = _number(query, "offset", 0, 10**9)
        limit = _number(query, "limit", dashboard.DEFAULT_ROWS, dashboard.MAX_ROWS)
        body = service.cached(
            f"api-goals:{offset}:{limit}:{f.model_dump_json()}",
            lambda s: dumps(
                dashboard.goals_page(
                    dashboard.filtered(s.projection.goals, f), f, offset=offset, limit=limit
                )
            ),
        )
        h._reply(HTTPStatus.OK, body)  # noqa: SLF001
    elif len(parts) in (3, 4, 5) and parts[1] == "goals":
        _goal(h, parts[2], parts[3:])
    else:
        h._error(HTTPStatus.NOT_FOUND, f"no such resource {h.path!r}")  # noqa: SLF001
    return True


def _goal(h: StatusHandler, goal_id: str, rest: list[str]) -> None:
    service = h.server.service
    snap = service.snapshot()
    if not is_valid_goal_id(goal_id) or goal_id not in snap.by_id:
        h._error(HTTPStatus.NOT_FOUND, f"no goal {goal_id!r} in the status projection")  # noqa: SLF001
        return
    if not rest:
        view = snap.projection.goals[snap.by_id[goal_id]]
        doc = dashboard.goal_detail(
            service.layout, view, service.goal_policy(goal_id), actions=service.actions
        )
        h._reply(HTTPStatus.OK, dumps(doc))  # noqa: SLF001
        return
    if rest == ["live"]:
        live = read_live(service.layout, goal_id)
        if live is None:  # no host runs now: not an error, so no 404 in the browser's console
            h._reply(HTTPStatus.NO_CONTENT, b"")  # noqa: SLF001
        else:
            h._reply(HTTPStatus.OK, dumps(live))  # noqa: SLF001
        return
    if len(rest) == 2 and rest[0] == "runs" and rest[1].isdigit():  # noqa: PLR2004
        log = dashboard.run_log(service.layout, goal_id, int(rest[1]))
        if log is not None:
            h._reply(HTTPStatus.OK, dumps(log))  # noqa: SLF001
            return
    h._error(HTTPStatus.NOT_FOUND, f"no such resource {h.path!r}")  # noqa: SLF001


def _stream(h: StatusHandler) -> None:
    """``/events``: a ``hello`` frame, then a frame per change, keep-alive comments between."""
    server = h.server
    feed = server.service.feed
    if not server.streams.take():
        h._error(HTTPStatus.SERVICE_UNAVAILABLE, "too many event streams open; retry later")  # noqa: SLF001
        return
    try:
        h.close_connection = True  # the stream ends with the connection
        h.send_response(HTTPStatus.OK)
        h.send_header("Content-Type", "text/event-stream; charset=utf-8")
        h.send_header("Cache-Control", "no-store")
        h.send_header("X-Accel-Buffering", "no")  # nginx: pass events through unbuffered
        h.end_headers()
        seq = feed.seq
        h.wfile.write(b"retry: 2000\n" + sse_frame("hello", json.dumps({"seq": seq}), event_id=seq))
        h.wfile.flush()
        ends = time.monotonic() + STREAM_MAX_S
        while not feed.closed and time.monotonic() < ends:
            events = feed.wait_after(seq, KEEPALIVE_S)
            if not events:
                h.wfile.write(b": keep-alive\n\n")
            for event in events:
                h.wfile.write(sse_frame("change", event.model_dump_json(), event_id=event.seq))
                seq = event.seq
            h.wfile.flush()
    except OSError:
        pass  # the client went away: its stream ends here
    finally:
        server.streams.give()


# --- actions -----------------------------------------------------------------------------------


def do_post(h: StatusHandler) -> bool:
    """Run ``POST /api/goals/<id>/<action>``; False when the path is not an action."""
    parts = [p for p in h.path.split("?", 1)[0].split("/") if p]
    if len(parts) != 4 or parts[:2] != ["api", "goals"]:  # noqa: PLR2004
        return False
    h.close_connection = True  # never read a second request after a body we may not have read
    service = h.server.service
    goal_id, name = parts[2], parts[3]
    if not service.actions:
        h._error(  # noqa: SLF001
            HTTPStatus.FORBIDDEN,
            "this server is read-only",
            hint="start it with `loopx serve --actions --token T` to answer gates from the page",
        )
        return True

    def audit(outcome: Outcome, detail: str, answer: str | None = None) -> None:
        record_audit(
            service.layout,
            AuditRecord(
                at=utcnow(),
                client=str(h.client_address[0]),
                action=name[:64],
                goal_id=goal_id[:64],
                outcome=outcome,
                detail=detail,
                answer=answer,
            ),
        )

    refusal = _refusal(h)
    if refusal is not None:
        status, message = refusal
        audit(Outcome.REFUSED, message)
        _discard_body(h)
        h._error(status, message)  # noqa: SLF001
        return True
    try:
        action = Action(name)
        request = ActionRequest.model_validate_json(h.rfile.read(_body_length(h)) or b"{}")
    except (ValueError, ValidationError) as e:
        message = str(e).splitlines()[0] if str(e) else "malformed action"
        audit(Outcome.REFUSED, message)
        h._error(HTTPStatus.BAD_REQUEST, message)  # noqa: SLF001
        return True
    try:
        result = perform(service.layout, goal_id, action, request, now=utcnow())
    except LoopxError as e:
        audit(Outcome.FAILED, e.message, request.answer)
        status = HTTPStatus.NOT_FOUND if isinstance(e, GoalNotFoundError) else HTTPStatus.CONFLICT
        h._error(status, e.message, e.hint)  # noqa: SLF001
        return True
    detail = f"gate {result.gate.id}" if result.gate is not None else str(result.goal_status)
    audit(Outcome.APPLIED, detail, request.answer)
    service.refresh_once(now_please=True)  # the page sees its own action at once
    h._reply(HTTPStatus.OK, dumps(result))  # noqa: SLF001
    return True


def _refusal(h: StatusHandler) -> tuple[HTTPStatus, str] | None:
    """Why this action request is refused before its body is read, or None."""
    headers = h.headers
    reason = cross_site_reason(
        headers.get("Sec-Fetch-Site"), headers.get("Origin"), headers.get("Host")
    )
    if reason is not None:
        return HTTPStatus.FORBIDDEN, reason
    if not h.server.token or not h._authorized():  # noqa: SLF001
        return HTTPStatus.UNAUTHORIZED, "missing or wrong bearer token (Authorization header)"
    if h.headers.get_content_type() != "application/json":
        return HTTPStatus.UNSUPPORTED_MEDIA_TYPE, "an action's body must be application/json"
    if h.headers.get("Transfer-Encoding"):
        return HTTPStatus.LENGTH_REQUIRED, "send the body with a Content-Length"
    return None


def _body_length(h: StatusHandler) -> int:
    raw = h.headers.get("Content-Length", "0")
    if not raw.isdigit() or int(raw) > MAX_ACTION_BODY:
        raise ValueError(f"an action's body must be at most {MAX_ACTION_BODY} bytes")
    return int(raw)


def _discard_body(h: StatusHandler) -> None:
    """Read a small unread body so closing the socket does not reset it before the reply lands."""
    raw = h.headers.get("Content-Length", "0")
    if raw.isdigit() and int(raw) <= MAX_ACTION_BODY:
        h.rfile.read(int(raw))
