"""The HTTP status server's JSON replies, as typed documents built from the projection.

``/status`` and ``/goals`` page the attention queue; ``/goals/<id>/turns``
reads the goal's newest history lines; ``/healthz`` says the cache answers;
``/goals/<id>`` is one goal's view; every error is an :class:`ErrorReply`.
"""

from __future__ import annotations

import os
from typing import Literal

from loopx.history.reader import newest_lines
from loopx.model import Record, UtcDatetime
from loopx.root import Layout
from loopx.status.view import (
    Actor,
    GoalStatusView,
    StatusProjection,
    StatusReason,
)
from loopx.turn.historyline import HistoryLine


class Page(Record):
    """Which slice of the ordered queue a reply holds."""

    offset: int
    limit: int
    total: int  # goals matching the filter
    next_offset: int | None  # None on the last page


class StatusPage(StatusProjection):
    """``GET /status``: the ``loopx status --json`` document with one page of ``goals``."""

    page: Page


class GoalDetail(GoalStatusView):
    """``GET /goals/<id>``: one goal's view, as in the status document's ``goals``."""

    schema_version: Literal[1] = 1


class GoalRow(Record):
    """One goal of ``GET /goals``: who acts next and why, in one line."""

    goal_id: str
    actor: Actor
    reason: StatusReason
    priority: int
    explanation: str
    next_eligible_at: UtcDatetime | None


class GoalPage(Record):
    """``GET /goals``: one compact row per goal, in queue order."""

    schema_version: Literal[1] = 1
    goals: list[GoalRow]
    page: Page


class DamagedLine(Record):
    """A history line that does not parse, shown instead of being dropped."""

    damaged_line: str  # its first 200 bytes


class GoalTurns(Record):
    """``GET /goals/<id>/turns``: the newest history lines, newest first, and the journals."""

    schema_version: Literal[1] = 1
    goal_id: str
    turns: list[HistoryLine | DamagedLine]
    journals: list[str]  # turn keys of goals/<id>/turns/, oldest first


class Health(Record):
    """``GET /healthz``: the server answers from a projection this fresh."""

    schema_version: Literal[1] = 1
    ok: bool
    checked_at: UtcDatetime
    goals: int
    degraded: str | None = None  # why the root cannot take writes now (disk full...), if so


class ErrorReply(Record):
    """Any non-200 JSON reply."""

    schema_version: Literal[1] = 1
    error: str
    status: int  # the HTTP status code, repeated for clients that only keep the body
    hint: str | None = None  # what to do about it, where the library said


def _page(goals: list[GoalStatusView], offset: int, limit: int) -> Page:
    end = offset + limit
    return Page(
        offset=offset, limit=limit, total=len(goals), next_offset=end if end < len(goals) else None
    )


def _matching(projection: StatusProjection, actor: Actor | None) -> list[GoalStatusView]:
    return [g for g in projection.goals if actor is None or g.actor is actor]


def status_page(
    projection: StatusProjection, *, offset: int, limit: int, actor: Actor | None
) -> StatusPage:
    """The projection, its goals (those ``actor`` acts on) cut to ``[offset, offset + limit)``."""
    goals = _matching(projection, actor)
    head = {name: getattr(projection, name) for name in StatusProjection.model_fields}
    return StatusPage(
        **head | {"goals": goals[offset : offset + limit]}, page=_page(goals, offset, limit)
    )


def goal_page(
    projection: StatusProjection, *, offset: int, limit: int, actor: Actor | None
) -> GoalPage:
    """One row per goal ``actor`` acts on, cut to ``[offset, offset + limit)``."""
    goals = _matching(projection, actor)
    rows = [
        GoalRow(
            goal_id=g.goal_id,
            actor=g.actor,
            reason=g.reason,
            priority=g.priority,
            explanation=g.explanation,
            next_eligible_at=g.next_eligible_at,
        )
        for g in goals[offset : offset + limit]
    ]
    return GoalPage(goals=rows, page=_page(goals, offset, limit))


def goal_detail(view: GoalStatusView) -> GoalDetail:
    """``view`` as a reply of its own."""
    return GoalDetail(**{name: getattr(view, name) for name in GoalStatusView.model_fields})


def goal_turns(layout: Layout, goal_id: str, limit: int) -> GoalTurns:
    """The newest ``limit`` history lines of ``goal_id`` and its newest ``limit`` journal keys."""
    lines: list[HistoryLine | DamagedLine] = [
        line
        if isinstance(line, HistoryLine)
        else DamagedLine(damaged_line=line[:200].decode(errors="replace"))
        for line in newest_lines(layout.history_file(goal_id), limit)
    ]
    try:
        names = os.listdir(layout.turns_dir(goal_id))
    except FileNotFoundError:
        names = []
    journals = sorted(n[:-5] for n in names if n.endswith(".json") and not n.startswith("."))
    return GoalTurns(goal_id=goal_id, turns=lines, journals=journals[-limit:])


def health(projection: StatusProjection) -> Health:
    """``/healthz`` for the current projection."""
    return Health(
        ok=True,
        checked_at=projection.checked_at,
        goals=projection.counts.total,
        degraded=projection.fleet.degraded,
    )
