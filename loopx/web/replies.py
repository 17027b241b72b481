"""What every route shares: JSON replies and refusals, the token check, the request's facts.

The request's parameters and service, and `handled` (a library error as its HTTP reply).

The routes live in :mod:`loopx.web.app` and the ``routes_*`` modules, which all import this
one and never each other, so the application has no import cycle.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from http import HTTPStatus

from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import Response

from loopx.errors import LoopxError
from loopx.ids import is_valid_goal_id
from loopx.status.documents import (
    ErrorReply,
)
from loopx.status.view import Actor
from loopx.web.service import StatusService
from loopx.web.worktrees import WorktreeStates


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


def not_allowed() -> Response:
    """405: only GET and HEAD (POST on the action routes)."""
    return error_reply(
        HTTPStatus.METHOD_NOT_ALLOWED,
        "only GET is allowed here (POST only on /api/goals/<id>/<action>, /api/bulk/<action> "
        "and /api/answers)",
        headers={"Allow": "GET, HEAD", "Connection": "close"},
    )


def query_number(request: Request, name: str, default: int, top: int) -> int:
    """The query parameter ``name`` as a count up to ``top`` (``default`` when absent)."""
    raw = request.query_params.get(name, str(default))
    if not raw.isdigit():
        raise ValueError(f"{name} must be a non-negative integer")
    return min(int(raw), top)


def query_actor(request: Request) -> Actor | None:
    """The ``actor`` filter of the query (None: every actor)."""
    actor = request.query_params.get("actor")
    if actor not in (None, *Actor):
        raise ValueError("actor must be human, agent or none")
    return Actor(actor) if actor is not None else None


def query_params(request: Request) -> dict[str, list[str]]:
    """Every query parameter with all its values, as the dashboard's filters read them."""
    query: dict[str, list[str]] = {}
    for key, value in request.query_params.multi_items():
        query.setdefault(key, []).append(value)
    return query


def service_of(request: Request) -> StatusService:
    """The status service the application serves from."""
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


def known_goal(request: Request) -> str | None:
    """The path's goal id when the status knows that goal (None: answer :func:`no_such_goal`)."""
    goal_id: str = request.path_params["goal_id"]
    snap = service_of(request).snapshot()
    return goal_id if is_valid_goal_id(goal_id) and goal_id in snap.by_id else None


def no_such_goal(request: Request) -> Response:
    """The 404 of a goal id the status does not know."""
    return error_reply(
        HTTPStatus.NOT_FOUND,
        f"no goal {request.path_params['goal_id']!r} in the status projection",
        hint="list the goals at /goals",
    )


def worktree_states(request: Request) -> WorktreeStates:
    """The server's worktree states (made at the first ask)."""
    states: WorktreeStates | None = getattr(request.app.state, "worktrees", None)
    if states is None:
        states = request.app.state.worktrees = WorktreeStates(service_of(request).layout)
    return states
