"""The records of the attention queue: what ``loopx status --json`` and the HTTP server show.

:mod:`loopx.status.projection` computes them from a goal's files; this module
only says what they hold.
"""

from __future__ import annotations

import functools
import math
from enum import StrEnum
from typing import Final, Literal

from pydantic import BaseModel, Field, TypeAdapter
from pydantic_core import SchemaSerializer

from loopx.accounts.records import AccountSummary
from loopx.donecheck import LastCheck
from loopx.fleet import FleetState
from loopx.model import Record, UtcDatetime, trusted
from loopx.quota.budget import QuotaView
from loopx.registry.goalrecords import GoalStatus
from loopx.turn.failures import FailureReason
from loopx.turn.outcome import ResultKind, TurnStatus

__all__ = [
    "Actor",
    "FleetIncident",
    "FleetView",
    "GoalStatusView",
    "IncidentKind",
    "LastTurn",
    "LeaseView",
    "ProbeObservation",
    "QuotaView",
    "StatusCounts",
    "StatusProjection",
    "StatusReason",
    "json_bytes",
    "serializer",
    "share_values",
    "trusted",
]


def json_bytes(record: BaseModel, *, indent: int | None) -> bytes:
    """``record`` as JSON bytes, as the serializer makes them.

    ``model_dump_json`` decodes them to a str that a writer encodes again: 20 MB
    of copies for the 10 MB status document of 10,000 goals.
    """
    return _adapter(type(record)).dump_json(record, indent=indent)


def serializer(kind: type[BaseModel]) -> SchemaSerializer:
    """The serializer :func:`json_bytes` uses for ``kind``, built."""
    adapter = _adapter(kind)
    # Built here: a deferred one builds on first use from its caller's frame, which may be
    # the top of the stack (then it fails). The record types resolve their own names.
    adapter.rebuild(_types_namespace={})
    return adapter.serializer


@functools.cache
def _adapter(kind: type[BaseModel]) -> TypeAdapter[BaseModel]:
    return TypeAdapter(kind)


class Actor(StrEnum):
    """Who must act next on a goal."""

    AGENT = "agent"  # an agent will (or does) run a turn
    HUMAN = "human"  # nothing moves until a person acts
    NONE = "none"  # quiet: done, or waiting for time to pass


class StatusReason(StrEnum):
    """Why the actor is who it is."""

    READY = "ready"
    RUNNING = "running"
    GATE_PENDING = "gate_pending"
    QUOTA_EXHAUSTED = "quota_exhausted"
    PAUSED = "paused"
    DONE = "done"
    CRASH_LOOP = "crash_loop"
    QUARANTINED = "quarantined"
    FAILING = "failing"
    WAITING = "waiting"


class LeaseView(Record):
    """Who holds a goal's lease."""

    agent_id: str
    hostname: str
    pid: int
    epoch: int
    turn_key: str | None
    acquired_at: UtcDatetime
    expires_at: UtcDatetime
    expired: bool
    last_output_at: UtcDatetime | None = None  # when its host last wrote output (coarse)
    activity: str | None = None  # a stall rung in force: "stalled: rung 1 of 4, resuming session"


class LastTurn(Record):
    """The newest line of a goal's run history."""

    turn_key: str
    seq: int
    status: TurnStatus  # committed, failed or stopped
    kind: ResultKind | None
    failure: FailureReason | None
    summary: str
    next_action: str | None
    ended_at: UtcDatetime
    # Why a failed turn failed, in the host's or LoopX's words (at most 300 characters, as in
    # the history line); its run log has the rest. Empty for a committed turn.
    failure_message: str = ""
    # What the turn ran on, and whether it was handed off there (None: an older history line).
    account: str | None = None
    host_kind: str | None = None
    handed_off: bool = False


class ProbeObservation(Record):
    """What a goal's ``next_probe`` command printed (``loopx probe``); kept in projections/."""

    schema_version: Literal[1] = 1
    goal_id: str
    command: str
    cwd: str
    exit_code: int | None  # None when killed at the deadline
    timed_out: bool = False
    stdout: str = ""
    stderr: str = ""
    truncated: bool = False  # output was cut at the byte limit
    started_at: UtcDatetime
    duration_s: float


class GoalStatusView(Record):
    """One goal's line of the attention queue."""

    goal_id: str
    objective: str
    goal_status: GoalStatus
    priority: int
    actor: Actor
    reason: StatusReason
    explanation: str  # one sentence: why, and what the actor does next
    next_eligible_at: UtcDatetime | None = None
    lease: LeaseView | None = None
    last_turn: LastTurn | None = None
    quota: QuotaView
    next_action: str | None = None
    open_gates: int = 0
    gate_question: str | None = None  # the oldest open gate's question
    consecutive_failures: int = 0
    turns_applied: int = 0
    warnings: list[str] = Field(default_factory=list)
    quarantined: list[str] = Field(default_factory=list)
    probe: ProbeObservation | None = None
    # The earliest time this view changes by time alone (a wait ends, a lease
    # expires, spend leaves the window); the cache re-projects the goal then.
    recheck_at: UtcDatetime | None = None
    # The goal's newest recorded done-check (from its state).
    last_check: LastCheck | None = None
    # The account the goal's turns run on (default-<kind> when it names none).
    account: str | None = None
    # Its turns run on a fallback account while its own did not admit them, in all; the
    # accounts it may hand off to (empty: none, or pinned by --no-handoff).
    handoffs: int = 0
    fallback_accounts: list[str] = Field(default_factory=list)
    # The host kind its turns run with (None: a view from before it was recorded).
    host_kind: str | None = None
    # The goal's sandbox and allow-list ("bwrap: pypi.org, github.com"); None: unconfined.
    sandbox: str | None = None


class IncidentKind(StrEnum):
    """What is wrong with the fleet itself, for a person to act on (status's Needs-you items)."""

    SUPERVISOR_DOWN = "supervisor_down"  # its record says it runs; its process is gone
    CRASH_LOOP = "crash_loop"  # the supervisor stopped restarting an agent
    DISK = "disk"  # a disk floor or quota stops new turns


class FleetIncident(Record):
    """One thing wrong with the fleet itself: no goal's reason, a person's to act on."""

    kind: IncidentKind
    explanation: str  # what is wrong and what to do
    since: UtcDatetime | None = None  # when it began, as far as the files tell


class FleetView(Record):
    """The supervisor and its agents, as far as status needs them."""

    # From supervisor.json, except ``dead``: recorded as starting, running or
    # stopping while its process is gone. None when no supervisor ever ran.
    state: FleetState | None = None
    pid: int | None = None
    # Why the root cannot take writes now (disk full, read-only), if it cannot.
    degraded: str | None = None
    agents_wanted: int = 0
    agents_alive: int = 0  # heartbeats fresher than HEARTBEAT_STALE_S
    restarts: int = 0
    crash_loop_agents: list[str] = Field(default_factory=list)
    updated_at: UtcDatetime | None = None
    # What needs a person about the fleet itself (the supervisor down, a crash loop, a disk
    # limit), most urgent first: shown above the goals' queue.
    incidents: list[FleetIncident] = Field(default_factory=list)


class StatusCounts(Record):
    """How many goals each actor and reason has."""

    total: int = 0
    by_actor: dict[str, int] = Field(default_factory=dict)
    by_reason: dict[str, int] = Field(default_factory=dict)


class StatusProjection(Record):
    """``loopx status --json``: the whole attention queue, humans first."""

    schema_version: Literal[1] = 1
    generated_at: UtcDatetime  # when the newest source change was projected
    checked_at: UtcDatetime  # when the sources were last checked for changes
    counts: StatusCounts
    fleet: FleetView
    quarantined_total: int = 0
    # Each account: its state, spend in its window, the goals waiting on it.
    accounts: list[AccountSummary] = Field(default_factory=list)
    goals: list[GoalStatusView] = Field(default_factory=list)


# Values many cached views hold equal (the quota view of goals of one policy with nothing spent,
# projected at the same ``now``; "waiting until <the same time>"; the default account's name),
# one instance each in a long-lived cache: about 900 bytes a goal. Cleared when
# full, so a long-lived process keeps at most this many.
_SHARED: dict[object, object] = {}
_SHARED_MAX: Final = 8192
_SHARED_FIELDS: Final = ("explanation", "next_eligible_at", "account")


def _exact(value: object) -> object:
    # Equal values that print differently (1 and 1.0, 0.0 and -0.0) must not be shared.
    if type(value) is float and value == 0.0:  # the sign apart: (float, 1.0) is 1.0's key
        return (float, value, math.copysign(1.0, value))
    return (type(value), value)


# The ids of the quota views in _SHARED: a view that holds one already (goals of one policy
# projected together share theirs) skips building its key.
_SHARED_QUOTAS: dict[int, object] = {}


def _shared(key: object, value: object) -> object:
    known = _SHARED.get(key)
    if known is None:
        if len(_SHARED) >= _SHARED_MAX:
            _SHARED.clear()
            _SHARED_QUOTAS.clear()
        _SHARED[key] = known = value
    return known


def share_values(view: GoalStatusView) -> GoalStatusView:
    """``view`` holding equal values already held, if any, instead of its own.

    Only equal values are swapped, so the view's JSON and equality are
    unchanged. For the views a long-lived cache keeps for every goal.
    """
    fields = view.__dict__  # swapped in place: an equal value, nobody holding the view can tell
    quota = fields["quota"]
    if _SHARED_QUOTAS.get(id(quota)) is not quota:
        quota = _shared((QuotaView, *map(_exact, quota.__dict__.values())), quota)
        fields["quota"] = _SHARED_QUOTAS[id(quota)] = quota
    for name in _SHARED_FIELDS:
        value = fields[name]
        if value is not None:
            fields[name] = _shared((type(value), value), value)
    at = fields["recheck_at"]
    if at is not None and at == fields["next_eligible_at"]:
        fields["recheck_at"] = fields["next_eligible_at"]  # one datetime where the two are equal
    return view
