"""Bulk requests: one answer for several gates, one pause or resume for several goals.

``POST /api/bulk/pause`` and ``POST /api/bulk/resume`` (body ``{"goal_ids": [...]}``)
apply one status change to many goals in one request, each through the same
:func:`~loopx.web.actions.perform` as a single click: a done goal is refused
on its own (409, naming ``loopx goal reopen``), the others are applied, and
the page refreshes once. Every item is a line of the audit log.

``POST /api/answers``: one answer text for several gates, each judged on its own.

Each item names its goal, its gate and (optionally) the question the person
read, exactly as a single answer does, and goes through the same
:func:`~loopx.web.actions.perform`: an item whose gate closed or changed gets
its own 409 with the gate open now, and the others are applied. Every item is
a line of the audit log. The reply lists one result per item, in order.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from http import HTTPStatus
from typing import Annotated, Final, Literal

from pydantic import Field

from loopx.errors import LoopxError
from loopx.model import Record
from loopx.registry.goalrecords import GoalStatus
from loopx.root import Layout
from loopx.state import Gate
from loopx.web.actioncalls import ActionCalls
from loopx.web.actions import (
    MAX_ANSWER_CHARS,
    Action,
    ActionRequest,
    Outcome,
    StaleGateError,
    perform,
    refusal_status,
)

MAX_GATES: Final = 100  # items per request; the page sends at most a page of rows
MAX_BULK_BODY: Final = 64 * 1024


class BulkActionRequest(Record):
    """The body of ``POST /api/goals/<pause|resume>``: the goals ticked and shown on the page."""

    goal_ids: Annotated[
        list[Annotated[str, Field(min_length=1, max_length=64)]],
        Field(min_length=1, max_length=MAX_GATES),
    ]


class GoalOutcome(Record):
    """How one goal of a bulk pause or resume ended."""

    goal_id: str
    status: int  # the HTTP status a single click would have had (200, 409, 404)
    outcome: Literal["applied", "repeated", "failed"]
    goal_status: GoalStatus | None = None  # after the action, when applied or repeated
    error: str | None = None
    hint: str | None = None


class BulkActionResult(Record):
    """The reply to a bulk pause or resume: one result per goal, in the request's order."""

    schema_version: Literal[1] = 1
    action: Action
    applied: int  # applied now or already so (repeated)
    refused: int
    results: list[GoalOutcome]


BULK_ACTIONS: Final = frozenset({Action.PAUSE, Action.RESUME})


class GateRef(Record):
    """One gate a bulk answer is for, as the page showed it."""

    goal_id: Annotated[str, Field(min_length=1, max_length=64)]
    gate_id: int
    question: Annotated[str, Field(max_length=MAX_ANSWER_CHARS)] | None = None


class BulkAnswerRequest(Record):
    """The body of ``POST /api/answers``."""

    answer: Annotated[str, Field(min_length=1, max_length=MAX_ANSWER_CHARS)]
    gates: Annotated[list[GateRef], Field(min_length=1, max_length=MAX_GATES)]


class GateAnswer(Record):
    """How one item of a bulk answer ended."""

    goal_id: str
    gate_id: int
    status: int  # the HTTP status a single answer would have had (200, 409, 404, 400)
    outcome: Literal["applied", "repeated", "stale", "failed"]
    error: str | None = None
    hint: str | None = None
    current_gate: Gate | None = None  # for ``stale``: the gate the goal asks now (None: none)


class BulkAnswerResult(Record):
    """The reply to ``POST /api/answers``: one result per item, in the request's order."""

    schema_version: Literal[1] = 1
    answer: str
    applied: int  # applied now or already so (repeated)
    refused: int  # stale or failed
    results: list[GateAnswer]


Audit = Callable[[str, Outcome, str, str | None], None]  # goal id, outcome, detail, answer


def act_each(
    calls: ActionCalls,
    layout: Layout,
    action: Action,
    request: BulkActionRequest,
    *,
    now: datetime,
    audit: Audit,
) -> BulkActionResult:
    """Apply ``action`` to each goal of ``request`` through :func:`perform`, auditing each."""
    results = [
        _act(calls, layout, action, goal_id, now=now, audit=audit) for goal_id in request.goal_ids
    ]
    applied = sum(r.outcome != "failed" for r in results)
    return BulkActionResult(
        action=action, applied=applied, refused=len(results) - applied, results=results
    )


def _act(
    calls: ActionCalls, layout: Layout, action: Action, goal_id: str, *, now: datetime, audit: Audit
) -> GoalOutcome:
    try:
        result = perform(calls, layout, goal_id, action, ActionRequest(), now=now)
    except LoopxError as e:
        audit(goal_id, Outcome.FAILED, f"{e.message} (bulk)", None)
        status = refusal_status(e)
        return GoalOutcome(
            goal_id=goal_id, status=status, outcome="failed", error=e.message, hint=e.hint
        )
    detail = f"{result.goal_status} (bulk)"
    if result.repeated:
        detail += " (already so: nothing written)"
    audit(goal_id, Outcome.APPLIED, detail, None)
    return GoalOutcome(
        goal_id=goal_id,
        status=HTTPStatus.OK,
        outcome="repeated" if result.repeated else "applied",
        goal_status=result.goal_status,
    )


def answer_each(
    calls: ActionCalls, layout: Layout, request: BulkAnswerRequest, *, now: datetime, audit: Audit
) -> BulkAnswerResult:
    """Answer each gate of ``request`` through :func:`perform`, auditing each attempt."""
    results = [
        _one(calls, layout, ref, request.answer, now=now, audit=audit) for ref in request.gates
    ]
    applied = sum(r.outcome in {"applied", "repeated"} for r in results)
    return BulkAnswerResult(
        answer=request.answer, applied=applied, refused=len(results) - applied, results=results
    )


def _one(
    calls: ActionCalls, layout: Layout, ref: GateRef, answer: str, *, now: datetime, audit: Audit
) -> GateAnswer:
    asked = ActionRequest(answer=answer, gate_id=ref.gate_id, question=ref.question)
    base = {"goal_id": ref.goal_id, "gate_id": ref.gate_id}
    try:
        result = perform(calls, layout, ref.goal_id, Action.RESOLVE_GATE, asked, now=now)
    except StaleGateError as e:
        audit(ref.goal_id, Outcome.FAILED, f"{e.message} (bulk answer)", answer)
        return GateAnswer(
            **base,
            status=HTTPStatus.CONFLICT,
            outcome="stale",
            error=e.message,
            hint=e.hint,
            current_gate=e.current,
        )
    except LoopxError as e:
        audit(ref.goal_id, Outcome.FAILED, f"{e.message} (bulk answer)", answer)
        status = refusal_status(e)
        return GateAnswer(**base, status=status, outcome="failed", error=e.message, hint=e.hint)
    detail = f"gate {ref.gate_id} (bulk answer)"
    if result.repeated:
        detail += " (already so: nothing written)"
    audit(ref.goal_id, Outcome.APPLIED, detail, answer)
    return GateAnswer(
        **base, status=HTTPStatus.OK, outcome="repeated" if result.repeated else "applied"
    )
