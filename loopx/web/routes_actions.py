"""``POST /api/goals/<id>/<action>``, ``/api/bulk/<pause|resume>``, ``/api/answers``; all audited.

Refused, in this order, before the body is read: a server started without
actions (403, with the option that enables them), a cross-site request
(403), a missing or wrong token (401; a cookie never authorises), a body
that is not ``application/json`` (415) or has no length (411) or is too
large (413). A body that does not parse is a 400 whose message is a
sentence naming the field; an answer for a gate that closed or changed is a
409 carrying the gate open now (:class:`~loopx.web.actions.GateConflict`).
"""

from __future__ import annotations

from http import HTTPStatus

from pydantic import ValidationError
from pydantic_core import ErrorDetails
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from loopx.errors import LoopxError
from loopx.model import utcnow
from loopx.web.actioncalls import ActionCalls
from loopx.web.actions import (
    MAX_ACTION_BODY,
    Action,
    ActionRequest,
    ActionResult,
    AuditRecord,
    GateConflict,
    Outcome,
    StaleGateError,
    cross_site_reason,
    perform,
    record_audit,
    refusal_status,
)
from loopx.web.bulkactions import (
    BULK_ACTIONS,
    MAX_BULK_BODY,
    Audit,
    BulkActionRequest,
    BulkAnswerRequest,
    act_each,
    answer_each,
)
from loopx.web.replies import authorized, error_reply, json_reply
from loopx.web.service import StatusService

_FIELDS = "send answer, gate_id and question (resolve-gate) or {} (pause, resume, done, reopen)"
_BULK_ACTION_FIELDS = "send goal_ids: [id, ...], at most 100"
_BULK_FIELDS = "send answer and gates: [{goal_id, gate_id, question}, ...], at most 100"


def describe_request_error(error: ValidationError, fields: str = _FIELDS) -> str:
    """One sentence for what is wrong with an action's body. Pure."""
    problems = [_problem(item, fields) for item in error.errors()]
    return "; ".join(problems) or "the action's body is not valid"


def _problem(item: ErrorDetails, fields: str) -> str:
    field = ".".join(str(p) for p in item["loc"]) or "the body"
    kind: str = item["type"]
    ctx = item.get("ctx") or {}
    simple = {
        "json_invalid": "the body is not valid JSON",
        "string_too_short": f"{field} must not be empty",
        "too_short": f"{field} must not be empty",
        "string_too_long": f"{field} is longer than {ctx.get('max_length')} characters",
        "too_long": f"{field} has more than {ctx.get('max_length')} items",
        "missing": f"{field} is missing ({fields})",
        "list_type": f"{field} must be a list",
        "extra_forbidden": f"{field!r} is not a field of an action ({fields})",
        "model_type": f"the body must be a JSON object ({fields})",
        "dict_type": f"the body must be a JSON object ({fields})",
    }
    if kind in simple:
        return simple[kind]
    if kind.startswith("int_"):
        return f"{field} must be a whole number"
    if kind.startswith("string_"):
        return f"{field} must be text"
    return f"{field}: {item['msg']}"


def _refusal(
    request: Request, service: StatusService, max_body: int = MAX_ACTION_BODY
) -> tuple[HTTPStatus, str] | None:
    """Why this action request is refused before its body is read, or None."""
    headers = request.headers
    reason = cross_site_reason(
        headers.get("sec-fetch-site"), headers.get("origin"), headers.get("host")
    )
    if reason is not None:
        return HTTPStatus.FORBIDDEN, reason
    token: str | None = request.app.state.token
    if not token or not authorized(token, headers.get("authorization")):
        return HTTPStatus.UNAUTHORIZED, "missing or wrong bearer token (Authorization header)"
    if headers.get("content-type", "").split(";")[0].strip().lower() != "application/json":
        return HTTPStatus.UNSUPPORTED_MEDIA_TYPE, "an action's body must be application/json"
    if "transfer-encoding" in headers:
        return HTTPStatus.LENGTH_REQUIRED, "send the body with a Content-Length"
    raw = headers.get("content-length", "0")
    if not raw.isdigit() or int(raw) > max_body:
        return (
            HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
            f"an action's body must be at most {max_body} bytes",
        )
    del service
    return None


def _read_only() -> Response:
    return error_reply(
        HTTPStatus.FORBIDDEN,
        "this server is read-only: it was started without --actions",
        hint="start it with `loopx serve --actions` to answer gates from the page",
    )


async def post_action(request: Request) -> Response:
    """Run one action, audit it, and refresh the snapshot so the page sees it at once."""
    service: StatusService = request.app.state.service
    goal_id: str = request.path_params["goal_id"]
    name: str = request.path_params["action"]
    calls = service.calls
    if calls is None:
        return _read_only()
    client = request.client.host if request.client is not None else "unknown"

    def audit(outcome: Outcome, detail: str, answer: str | None = None) -> None:
        record = AuditRecord(
            at=utcnow(),
            client=client,
            action=name[:64],
            goal_id=goal_id[:64],
            outcome=outcome,
            detail=detail,
            answer=answer,
        )
        record_audit(service.layout, record)

    refusal = _refusal(request, service)
    if refusal is not None:
        status, message = refusal
        await run_in_threadpool(audit, Outcome.REFUSED, message)
        return error_reply(status, message, headers={"Connection": "close"})
    try:
        body = await request.body()
    except ClientDisconnect:
        return Response(status_code=HTTPStatus.BAD_REQUEST)
    try:
        action = Action(name)
    except ValueError:
        message = f"no action {name!r}; the actions are {', '.join(Action)}"
        await run_in_threadpool(audit, Outcome.REFUSED, message)
        return error_reply(HTTPStatus.NOT_FOUND, message)
    try:
        asked = ActionRequest.model_validate_json(body or b"{}")
    except ValidationError as e:
        message = describe_request_error(e)
        await run_in_threadpool(audit, Outcome.REFUSED, message)
        return error_reply(HTTPStatus.BAD_REQUEST, message)
    return await run_in_threadpool(
        _apply, service, calls, goal_id, action=action, asked=asked, audit=audit
    )


def _bulk_audit(request: Request, service: StatusService, action: str) -> Audit:
    """The audit line writer of one bulk request: one line per goal, or one for the request."""
    client = request.client.host if request.client is not None else "unknown"

    def audit(goal_id: str, outcome: Outcome, detail: str, answer: str | None = None) -> None:
        record = AuditRecord(
            at=utcnow(),
            client=client,
            action=action[:64],
            goal_id=goal_id[:64],
            outcome=outcome,
            detail=detail,
            answer=answer,
        )
        record_audit(service.layout, record)

    return audit


async def _bulk_body(request: Request, service: StatusService, audit: Audit) -> bytes | Response:
    """The bulk request's body, or the reply refusing it (audited as the request's)."""
    refusal = _refusal(request, service, MAX_BULK_BODY)
    if refusal is not None:
        status, message = refusal
        await run_in_threadpool(audit, "(bulk)", Outcome.REFUSED, message, None)
        return error_reply(status, message, headers={"Connection": "close"})
    try:
        return await request.body()
    except ClientDisconnect:
        return Response(status_code=HTTPStatus.BAD_REQUEST)


async def post_answers(request: Request) -> Response:
    """``POST /api/answers``: one answer for several gates, each judged and audited on its own."""
    service: StatusService = request.app.state.service
    calls = service.calls
    if calls is None:
        return _read_only()
    audit = _bulk_audit(request, service, Action.RESOLVE_GATE.value)
    body = await _bulk_body(request, service, audit)
    if isinstance(body, Response):
        return body
    try:
        asked = BulkAnswerRequest.model_validate_json(body or b"{}")
    except ValidationError as e:
        message = describe_request_error(e, fields=_BULK_FIELDS)
        await run_in_threadpool(audit, "(bulk)", Outcome.REFUSED, message, None)
        return error_reply(HTTPStatus.BAD_REQUEST, message)

    def run() -> Response:
        result = answer_each(calls, service.layout, asked, now=utcnow(), audit=audit)
        if result.applied:
            service.tick_now()
        return json_reply(result)

    return await run_in_threadpool(run)


async def post_bulk(request: Request) -> Response:
    """``POST /api/bulk/<pause|resume>``: one status change for many goals, applied as a batch."""
    service: StatusService = request.app.state.service
    name: str = request.path_params["action"]
    calls = service.calls
    if calls is None:
        return _read_only()
    audit = _bulk_audit(request, service, name)
    body = await _bulk_body(request, service, audit)
    if isinstance(body, Response):
        return body
    if name not in BULK_ACTIONS:
        message = f"no bulk action {name!r}; the bulk actions are {', '.join(sorted(BULK_ACTIONS))}"
        await run_in_threadpool(audit, "(bulk)", Outcome.REFUSED, message, None)
        return error_reply(HTTPStatus.NOT_FOUND, message)
    try:
        asked = BulkActionRequest.model_validate_json(body or b"{}")
    except ValidationError as e:
        message = describe_request_error(e, fields=_BULK_ACTION_FIELDS)
        await run_in_threadpool(audit, "(bulk)", Outcome.REFUSED, message, None)
        return error_reply(HTTPStatus.BAD_REQUEST, message)

    def run() -> Response:
        result = act_each(calls, service.layout, Action(name), asked, now=utcnow(), audit=audit)
        if result.applied:
            service.tick_now()
        return json_reply(result)

    return await run_in_threadpool(run)


def _apply(
    service: StatusService,
    calls: ActionCalls,
    goal_id: str,
    *,
    action: Action,
    asked: ActionRequest,
    audit: object,
) -> Response:
    assert callable(audit)  # noqa: S101 - the closure above
    try:
        result = perform(calls, service.layout, goal_id, action, asked, now=utcnow())
    except StaleGateError as e:
        audit(Outcome.FAILED, e.message, asked.answer)
        conflict = GateConflict(
            error=e.message, hint=e.hint, goal_id=goal_id, gate_id=e.gate_id, current_gate=e.current
        )
        return json_reply(conflict, HTTPStatus.CONFLICT)
    except LoopxError as e:
        audit(Outcome.FAILED, e.message, asked.answer)
        status = refusal_status(e)
        return error_reply(status, e.message, e.hint)
    detail = _applied(result)
    if result.repeated:
        detail += " (already so: nothing written)"
    audit(Outcome.APPLIED, detail, asked.answer)
    service.tick_now()
    return json_reply(result)


def _applied(result: ActionResult) -> str:
    """An applied action's audit detail: the gate answered, the merge's end, or the new status."""
    if result.gate is not None:
        return f"gate {result.gate.id}"
    merge = result.merge
    if merge is not None:
        merged = f" as {merge.merged_commit[:12]}" if merge.merged_commit else ""
        gate = f", gate {merge.gate_id} opened" if merge.gate_id is not None else ""
        conflicts = f" in {', '.join(merge.conflicts[:5])}" if merge.conflicts else ""
        return f"merge {merge.outcome}{merged}{conflicts}{gate}"
    return str(result.goal_status)
