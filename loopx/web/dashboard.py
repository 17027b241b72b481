"""The dashboard's JSON documents, built from the status projection. Pure except the readers.

``/api/overview`` (attention queue head, fleet, counts), ``/api/goals`` (a
filtered page of the ordered queue), ``/api/goals/<id>`` (one goal's policy,
state, view and recent turns) and ``/api/goals/<id>/runs/<seq>`` (a run log).
A page costs a slice of the ordered projection, so 100,000 goals answer as
fast as 10; a text filter costs one pass over the goals, cached per
refresh generation by the server.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Final, Literal

from pydantic import Field

from loopx.errors import LoopxError
from loopx.fleet import AgentHeartbeat, FleetRecord
from loopx.model import Record, UtcDatetime
from loopx.registry.goalrecords import GoalStatus
from loopx.root import Layout
from loopx.state import Gate, load_state
from loopx.status.fleetview import HEARTBEAT_STALE_S
from loopx.status.view import (
    Actor,
    FleetView,
    GoalStatusView,
    StatusCounts,
    StatusProjection,
    StatusReason,
)
from loopx.web.panels import AccountRow, account_row
from loopx.web.worktrees import MergeWaiting

ATTENTION_HUMANS: Final = 25
ATTENTION_AGENTS: Final = 10
DEFAULT_ROWS: Final = 50
MAX_ROWS: Final = 500
MAX_QUERY_CHARS: Final = 200


class GoalRow(Record):
    """One line of the goals table (the view's fields a row shows)."""

    goal_id: str
    objective: str
    goal_status: GoalStatus
    priority: int
    actor: Actor
    reason: StatusReason
    explanation: str
    next_eligible_at: UtcDatetime | None = None
    gate_question: str | None = None
    gate_id: int | None = None  # the oldest open gate, whose question gate_question then is
    open_gates: int = 0
    agent_id: str | None = None  # the lease holder while running
    last_turn_at: UtcDatetime | None = None
    last_turn_seq: int | None = None
    last_turn_status: str | None = None
    last_failure: str | None = None  # the last turn's failure reason code, when it failed
    failure_message: str = ""  # and its message (the host's or LoopX's words), shown on the card
    consecutive_failures: int = 0
    quota_used: float = 0.0  # spent / allowance of the wall budget, 0..1+


def goal_row(view: GoalStatusView) -> GoalRow:
    """A view as a table row. Pure."""
    q = view.quota
    last = view.last_turn
    return GoalRow(
        goal_id=view.goal_id,
        objective=view.objective,
        goal_status=view.goal_status,
        priority=view.priority,
        actor=view.actor,
        reason=view.reason,
        explanation=view.explanation,
        next_eligible_at=view.next_eligible_at,
        gate_question=view.gate_question,
        open_gates=view.open_gates,
        agent_id=view.lease.agent_id if view.lease is not None else None,
        last_turn_at=last.ended_at if last is not None else None,
        last_turn_seq=last.seq if last is not None else None,
        last_turn_status=last.status if last is not None else None,
        last_failure=str(last.failure) if last is not None and last.failure else None,
        failure_message=last.failure_message if last is not None else "",
        consecutive_failures=view.consecutive_failures,
        quota_used=q.spent_wall_s / q.allowance_wall_s if q.allowance_wall_s > 0 else 0.0,
    )


class PageInfo(Record):
    """Where a page sits in the filtered list."""

    offset: int
    limit: int
    total: int
    next_offset: int | None


class GoalSort(StrEnum):
    """How the goals table is ordered."""

    URGENCY = "urgency"  # the attention queue's order: who must act, then why
    ID = "id"
    PRIORITY = "priority"  # highest first
    LAST_TURN = "last_turn"  # most recent first; never-run goals last


class GoalFilter(Record):
    """The goals table's filters (all optional)."""

    actor: Actor | None = None
    reason: StatusReason | None = None
    q: str | None = None  # case-insensitive substring of the id or the objective
    sort: GoalSort = GoalSort.URGENCY


class GoalsPage(Record):
    """``/api/goals``: one page of the filtered, urgency-ordered goals."""

    schema_version: Literal[1] = 1
    filter: GoalFilter
    page: PageInfo
    rows: list[GoalRow]


class AgentRow(Record):
    """One agent slot: what it runs now and how healthy it is."""

    agent_id: str
    alive: bool
    phase: str | None = None
    goal_id: str | None = None
    turn_key: str | None = None
    turn_since: UtcDatetime | None = None  # when it took the lease of the goal it runs
    started_at: UtcDatetime | None = None  # the agent process's start
    beat_at: UtcDatetime | None = None
    turns_done: int = 0
    restarts: int = 0
    crash_loop: bool = False
    last_exit: str | None = None


class Overview(Record):
    """``/api/overview``: counts, fleet, and the head of the attention queue."""

    schema_version: Literal[1] = 1
    generated_at: UtcDatetime
    checked_at: UtcDatetime
    seq: int  # the newest change event's number when this was built
    actions: bool  # whether this server accepts actions
    counts: StatusCounts
    fleet: FleetView
    agents: list[AgentRow]
    humans: list[GoalRow]  # needs a person: gates, failing, paused, quarantined, crash loops
    next_up: list[GoalRow]  # what agents run now or next
    accounts: list[AccountRow] = Field(default_factory=list)  # the accounts panel
    # Done worktree goals whose branch holds commits the base lacks (loopx.web.worktrees).
    merge_waiting: list[MergeWaiting] = Field(default_factory=list)
    merge_waiting_total: int = 0


# --- builders ----------------------------------------------------------------------------------


def agent_rows(
    fleet: FleetRecord | None, beats: Sequence[AgentHeartbeat], *, now: datetime
) -> list[AgentRow]:
    """Each supervisor slot joined with its agent's heartbeat (heartbeats alone without one)."""
    stale = now - timedelta(seconds=HEARTBEAT_STALE_S)
    by_id = {b.agent_id: b for b in beats}
    rows: list[AgentRow] = []
    slots = fleet.slots if fleet is not None else []
    for agent_id in [s.agent_id for s in slots] + sorted(set(by_id) - {s.agent_id for s in slots}):
        slot = next((s for s in slots if s.agent_id == agent_id), None)
        beat = by_id.get(agent_id)
        rows.append(
            AgentRow(
                agent_id=agent_id,
                alive=beat is not None and beat.beat_at >= stale,
                phase=beat.phase.value if beat is not None else None,
                goal_id=beat.goal_id if beat is not None else None,
                turn_key=beat.turn_key if beat is not None else None,
                turn_since=beat.turn_started_at if beat is not None else None,
                started_at=beat.started_at if beat is not None else None,
                beat_at=beat.beat_at if beat is not None else None,
                turns_done=beat.turns_done if beat is not None else 0,
                restarts=slot.restarts if slot is not None else 0,
                crash_loop=slot.crash_loop if slot is not None else False,
                last_exit=slot.last_exit.describe()
                if slot is not None and slot.last_exit
                else None,
            )
        )
    return rows


def oldest_open_gates(layout: Layout, goal_ids: Sequence[str]) -> dict[str, Gate]:
    """The oldest open gate of each goal that has one (its state read now; damaged ones skipped)."""
    found: dict[str, Gate] = {}
    for goal_id in goal_ids:
        with contextlib.suppress(LoopxError, OSError):
            gate = next(iter(load_state(layout, goal_id).open_gates), None)
            if gate is not None:
                found[goal_id] = gate
    return found


def _with_gate(row: GoalRow, gates: Mapping[str, Gate]) -> GoalRow:
    gate = gates.get(row.goal_id)
    if gate is None:
        return row
    return row.model_copy(update={"gate_id": gate.id, "gate_question": gate.question})


def overview(
    projection: StatusProjection,
    by_id: Mapping[str, int],
    *,
    agents: list[AgentRow],
    seq: int,
    actions: bool,
    gates: Mapping[str, Gate] | None = None,
) -> Overview:
    """The overview document. Pure; costs a slice, not a pass over the goals.

    ``gates`` (goal id to its oldest open gate, read from the states) puts on
    each card the gate an answer is for, with that gate's own question.
    """
    humans = projection.counts.by_actor.get(Actor.HUMAN.value, 0)
    agent_count = projection.counts.by_actor.get(Actor.AGENT.value, 0)
    goals = projection.goals

    def with_turn(row: AgentRow) -> AgentRow:
        if row.turn_since is not None:  # the agent's heartbeat names its turn and its start
            return row
        index = by_id.get(row.goal_id) if row.goal_id is not None else None
        lease = goals[index].lease if index is not None else None
        if lease is None or lease.agent_id != row.agent_id:
            return row
        return row.model_copy(update={"turn_since": lease.acquired_at})

    return Overview(
        generated_at=projection.generated_at,
        checked_at=projection.checked_at,
        seq=seq,
        actions=actions,
        counts=projection.counts,
        fleet=projection.fleet,
        agents=[with_turn(a) for a in agents],
        humans=[_with_gate(goal_row(v), gates or {}) for v in attention_head(projection)],
        next_up=[
            with_running(goal_row(v), running_turns(agents))
            for v in goals[humans : humans + min(agent_count, ATTENTION_AGENTS)]
        ],
        accounts=[account_row(a) for a in projection.accounts],
    )


def running_turns(agents: Sequence[AgentRow]) -> dict[str, AgentRow]:
    """The goals a live agent runs a turn of now, by goal id (from the heartbeats). Pure."""
    return {a.goal_id: a for a in agents if a.alive and a.goal_id and a.turn_key}


def with_running(row: GoalRow, running: Mapping[str, AgentRow]) -> GoalRow:
    """``row`` as ``running`` when a live agent's heartbeat names a turn of it, however short.

    The projection learns of a turn from its lease at the next refresh; a
    turn shorter than the refresh interval would show as ``ready`` throughout.
    """
    agent = running.get(row.goal_id)
    if agent is None:
        return row
    return row.model_copy(
        update={
            "actor": Actor.AGENT,
            "reason": StatusReason.RUNNING,
            "agent_id": agent.agent_id,
            "explanation": f"{agent.agent_id} runs turn {agent.turn_key}",
        }
    )


def attention_head(projection: StatusProjection) -> Sequence[GoalStatusView]:
    """The goals the overview shows as "needs you" cards: the queue's first humans."""
    humans = projection.counts.by_actor.get(Actor.HUMAN.value, 0)
    return projection.goals[: min(humans, ATTENTION_HUMANS)]


def parse_filter(query: dict[str, list[str]]) -> GoalFilter:
    """The table filter from a query string.

    Raises:
        ValueError: an unknown actor or reason, or an overlong text.

    """

    def one(name: str) -> str | None:
        value = query.get(name, [""])[-1].strip()
        return value or None

    actor, reason, text, sort = one("actor"), one("reason"), one("q"), one("sort")
    if sort is not None and sort not in set(GoalSort):
        raise ValueError(f"sort must be one of {', '.join(GoalSort)}")
    if actor is not None and actor not in set(Actor):
        raise ValueError(f"actor must be one of {', '.join(Actor)}")
    if reason is not None and reason not in set(StatusReason):
        raise ValueError(f"reason must be one of {', '.join(StatusReason)}")
    if text is not None and len(text) > MAX_QUERY_CHARS:
        raise ValueError(f"q is longer than {MAX_QUERY_CHARS} characters")
    return GoalFilter(
        actor=Actor(actor) if actor else None,
        reason=StatusReason(reason) if reason else None,
        q=text,
        sort=GoalSort(sort) if sort else GoalSort.URGENCY,
    )


def filtered(goals: Sequence[GoalStatusView], f: GoalFilter) -> Sequence[GoalStatusView]:
    """The goals matching ``f``, in its order. Pure; no filter, queue order returns ``goals``."""
    if f.actor is None and f.reason is None and f.q is None:
        return _sorted(goals, f.sort)
    needle = f.q.casefold() if f.q else None
    return _sorted(
        [
            g
            for g in goals
            if (f.actor is None or g.actor is f.actor)
            and (f.reason is None or g.reason is f.reason)
            and (
                needle is None or needle in g.goal_id.casefold() or needle in g.objective.casefold()
            )
        ],
        f.sort,
    )


def _sorted(goals: Sequence[GoalStatusView], sort: GoalSort) -> Sequence[GoalStatusView]:
    if sort is GoalSort.ID:
        return sorted(goals, key=lambda g: g.goal_id)
    if sort is GoalSort.PRIORITY:
        return sorted(goals, key=lambda g: (-g.priority, g.goal_id))
    if sort is GoalSort.LAST_TURN:
        ran = [g for g in goals if g.last_turn is not None]
        never = [g for g in goals if g.last_turn is None]
        return (
            sorted(ran, key=lambda g: g.last_turn.ended_at if g.last_turn else 0, reverse=True)
            + never
        )
    return goals


def goals_page(
    goals: Sequence[GoalStatusView],
    f: GoalFilter,
    *,
    offset: int,
    limit: int,
    running: Mapping[str, AgentRow] | None = None,
    gates: Mapping[str, Gate] | None = None,
) -> GoalsPage:
    """One page of the table, each row ``running`` that a live agent runs now. Pure.

    ``gates`` (a goal's oldest open gate) names on its row the gate a bulk answer is for.
    """
    total = len(goals)
    end = offset + limit
    return GoalsPage(
        filter=f,
        page=PageInfo(
            offset=offset, limit=limit, total=total, next_offset=end if end < total else None
        ),
        rows=[
            _with_gate(with_running(goal_row(v), running or {}), gates or {})
            for v in goals[offset:end]
        ],
    )


def dumps(record: Record) -> bytes:
    """A reply body: compact JSON and a newline."""
    return record.model_dump_json().encode() + b"\n"
