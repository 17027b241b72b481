"""Dashboard actions: answer a gate, pause, resume, mark done, reopen; each one audited.

Every action makes the same API call as the CLI (``loopx gate resolve``,
``loopx goal pause|resume|done|reopen``), handed to the server by the API as
:class:`~loopx.web.actioncalls.ActionCalls`, so validation, locks and error
messages are the CLI's: a done goal is neither paused nor resumed (409,
"goal X is done; `loopx goal reopen X` runs it again"). Every attempt that reaches the server with actions
enabled, allowed or refused, is appended to ``logs/audit.jsonl``.
"""

from __future__ import annotations

import os
import secrets
from datetime import datetime
from enum import StrEnum
from http import HTTPStatus
from pathlib import Path
from typing import Annotated, Final, Literal
from urllib.parse import urlsplit

from pydantic import Field

from loopx.errors import GoalNotFoundError, GoalStateError, InvalidPolicyError, LoopxError
from loopx.model import Record, UtcDatetime
from loopx.registry.goalrecords import GoalStatus
from loopx.registry.goals import get_goal
from loopx.root import Layout
from loopx.state import Gate, GoalState, load_state
from loopx.storage.dirs import ensure_dir
from loopx.storage.jsonl import append_record
from loopx.web.actioncalls import ActionCalls, ChangeStatus
from loopx.worktree.mergejournal import MergeJournal

AUDIT_NAME: Final = "audit.jsonl"
AUDIT_TAIL_BYTES: Final = 256 * 1024
MAX_ACTION_BODY: Final = 16 * 1024
MAX_ANSWER_CHARS: Final = 4000
TOKEN_HEADER: Final = "X-Loopx-Token"  # noqa: S105 - a header name, not a secret


class Action(StrEnum):
    """What a dashboard user may do to a goal."""

    RESOLVE_GATE = "resolve-gate"
    PAUSE = "pause"
    RESUME = "resume"
    DONE = "done"
    REOPEN = "reopen"  # a done goal runs again; the page asks to confirm first
    MERGE = "merge"  # `loopx goal merge` (docs/work.md), run as a child process


class Outcome(StrEnum):
    """How an audited attempt ended."""

    APPLIED = "applied"
    REFUSED = "refused"  # no token, wrong token, cross-site, malformed request
    FAILED = "failed"  # the library refused it (no such goal, no open gate, ...)


class ActionRequest(Record):
    """The JSON body of ``POST /api/goals/<id>/<action>``.

    A gate answer names the gate it answers (``gate_id``) and may repeat the
    question the person read (``question``), so that an answer typed on a
    stale page is refused instead of landing on another gate.
    """

    answer: Annotated[str, Field(min_length=1, max_length=MAX_ANSWER_CHARS)] | None = None
    gate_id: int | None = None
    question: Annotated[str, Field(max_length=MAX_ANSWER_CHARS)] | None = None


class ActionResult(Record):
    """The reply to an applied action."""

    schema_version: Literal[1] = 1
    goal_id: str
    action: Action
    goal_status: GoalStatus | None = None  # pause, resume, done, reopen
    gate: Gate | None = None  # resolve-gate
    merge: MergeJournal | None = None  # merge: its journal (outcome, gate opened)
    repeated: bool = False  # the goal already was so (a second click): nothing was written


class GateConflict(Record):
    """The 409 reply to an answer for a gate that closed or changed: the gate open now, if any."""

    schema_version: Literal[1] = 1
    error: str
    status: int = 409
    hint: str | None = None
    goal_id: str
    gate_id: int | None
    current_gate: Gate | None  # the gate the goal waits on now (None: none is open)


class StaleGateError(LoopxError):
    """An answer for a gate that is not the open one the person saw; nothing was changed."""

    def __init__(self, goal_id: str, gate_id: int | None, why: str, current: Gate | None) -> None:
        self.goal_id, self.gate_id, self.why, self.current = goal_id, gate_id, why, current
        hint = (
            f"the goal now asks (gate {current.id}): {current.question}"
            if current is not None
            else "no gate of this goal is open now"
        )
        super().__init__(f"goal {goal_id}: {why}; your answer was not applied", hint=hint)

    def __reduce__(self) -> tuple[object, ...]:
        return type(self), (self.goal_id, self.gate_id, self.why, self.current)


def refusal_status(e: LoopxError) -> HTTPStatus:
    """The HTTP status of an action the library refused: 404 no such goal, 400 a bad value, else 409."""
    if isinstance(e, GoalNotFoundError):
        return HTTPStatus.NOT_FOUND
    if isinstance(e, InvalidPolicyError):
        return HTTPStatus.BAD_REQUEST
    return HTTPStatus.CONFLICT


class AuditRecord(Record):
    """One line of ``logs/audit.jsonl``: who tried what on which goal, and how it ended."""

    schema_version: Literal[1] = 1
    id: str = Field(default_factory=lambda: secrets.token_hex(8))
    at: UtcDatetime
    client: str  # the peer address the request came from
    action: str  # an Action value, or the unknown name that was asked for
    goal_id: str
    outcome: Outcome
    detail: str = ""  # the refusal or error message; the answer's gate id when applied
    answer: str | None = None  # a gate's answer as given


def audit_file(layout: Layout) -> Path:
    """``logs/audit.jsonl``."""
    return layout.logs_dir / AUDIT_NAME


class AuditPage(Record):
    """``/api/audit``: the newest audit records, newest first."""

    schema_version: Literal[1] = 1
    records: list[AuditRecord]
    damaged_lines: int = 0  # lines of the tail read that are not audit records
    truncated: bool = False  # older records exist beyond what was read


def read_audit(layout: Layout, limit: int) -> AuditPage:
    """The newest ``limit`` records of the audit log (from its last 256 KiB), newest first."""
    path = audit_file(layout)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return AuditPage(records=[])
    try:
        size = os.fstat(fd).st_size
        start = max(0, size - AUDIT_TAIL_BYTES)
        data = os.pread(fd, size - start, start)
    finally:
        os.close(fd)
    lines = data.split(b"\n")
    if start > 0:
        lines = lines[1:]  # the first line may be cut
    records: list[AuditRecord] = []
    damaged = 0
    for line in reversed([x for x in lines if x.strip()]):
        if len(records) >= limit:
            break
        try:
            records.append(AuditRecord.model_validate_json(line))
        except ValueError:
            damaged += 1
    return AuditPage(records=records, damaged_lines=damaged, truncated=start > 0)


def record_audit(layout: Layout, record: AuditRecord) -> None:
    """Append ``record`` to the audit log (durable, under the file's lock)."""
    ensure_dir(layout.logs_dir)
    append_record(audit_file(layout), record, key_field="id")


def perform(
    calls: ActionCalls,
    layout: Layout,
    goal_id: str,
    action: Action,
    request: ActionRequest,
    *,
    now: datetime,
) -> ActionResult:
    """Apply ``action`` through the CLI's API call, one of ``calls``; ``layout`` is read only.

    Raises:
        GoalNotFoundError: no such goal.
        StaleGateError: the answer's gate closed (with another answer) or changed.
        GoalStateError: the goal is archived; pause or resume of a done goal; reopen of
            a goal that is not done.
        InvalidPolicyError: a gate answer or its gate id is missing.

    """
    if action is Action.RESOLVE_GATE:
        return _answer(calls, layout, goal_id, request, now=now)
    if action is Action.MERGE:
        return ActionResult(goal_id=goal_id, action=action, merge=calls.merge(goal_id))
    change = _status_call(calls, action)(goal_id, now=now)
    return ActionResult(
        goal_id=goal_id, action=action, goal_status=change.goal.status, repeated=change.repeated
    )


def _status_call(calls: ActionCalls, action: Action) -> ChangeStatus:
    """The call behind a status action: pause, resume, done or reopen."""
    by_action = {
        Action.PAUSE: calls.pause,
        Action.RESUME: calls.resume,
        Action.DONE: calls.done,
        Action.REOPEN: calls.reopen,
    }
    return by_action[action]


def _check_gate(goal_id: str, state: GoalState, request: ActionRequest) -> Gate | None:
    """The gate ``request`` answers if it is open and unchanged; None if it already holds this answer.

    Raises:
        StaleGateError: the gate does not exist, changed, or holds another answer.

    """
    current = next(iter(state.open_gates), None)
    gate = next((g for g in state.gates if g.id == request.gate_id), None)
    if gate is None:
        raise StaleGateError(
            goal_id, request.gate_id, f"gate {request.gate_id} does not exist", current
        )
    if request.question is not None and gate.question != request.question:
        raise StaleGateError(goal_id, gate.id, f"gate {gate.id} asks another question now", current)
    if not gate.is_open:
        if gate.answer == request.answer:
            return None
        raise StaleGateError(
            goal_id, gate.id, f"gate {gate.id} was already answered ({gate.answer!r})", current
        )
    return gate


def _answer(
    calls: ActionCalls, layout: Layout, goal_id: str, request: ActionRequest, *, now: datetime
) -> ActionResult:
    if request.answer is None or not request.answer.strip():
        raise InvalidPolicyError("answer", "a gate answer must not be empty")
    if request.gate_id is None:
        raise InvalidPolicyError(
            "gate_id", "say which gate the answer is for (gate_id); the dashboard sends it"
        )
    get_goal(layout, goal_id)
    gate = _check_gate(goal_id, load_state(layout, goal_id), request)
    if gate is None:
        done = next(g for g in load_state(layout, goal_id).gates if g.id == request.gate_id)
        return ActionResult(goal_id=goal_id, action=Action.RESOLVE_GATE, gate=done, repeated=True)
    try:
        resolved = calls.resolve_gate(goal_id, answer=request.answer, gate=gate.id, now=now).gate
    except GoalStateError:  # answered in between: judged again against what is there now
        state = load_state(layout, goal_id)
        if _check_gate(goal_id, state, request) is None:
            done = next(g for g in state.gates if g.id == gate.id)
            return ActionResult(
                goal_id=goal_id, action=Action.RESOLVE_GATE, gate=done, repeated=True
            )
        raise
    return ActionResult(goal_id=goal_id, action=Action.RESOLVE_GATE, gate=resolved)


def cross_site_reason(site: str | None, origin: str | None, host: str | None) -> str | None:
    """Why a state-changing request looks cross-site, or None when it does not. Pure.

    Browsers send ``Sec-Fetch-Site`` and ``Origin`` with every POST; a page on
    another site can never make them say ``same-origin`` and this host.
    Clients that send neither (curl, scripts) are judged by the token alone.

    Args:
        site: the ``Sec-Fetch-Site`` header.
        origin: the ``Origin`` header.
        host: the ``Host`` header (what the browser addressed).

    """
    if site is not None and site not in {"same-origin", "none"}:
        return f"Sec-Fetch-Site is {site!r}; actions are accepted from this dashboard only"
    if origin is not None:
        if origin == "null":
            return "Origin is null (a sandboxed or file page); use the dashboard itself"
        if host is None or urlsplit(origin).netloc.lower() != host.lower():
            return f"Origin {origin!r} is not this server ({host}); cross-site requests are refused"
    return None
