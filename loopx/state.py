"""Goal state: what the agent believes and intends next, and the gates waiting on a human."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Final, Literal

from pydantic import Field

from loopx.donecheck import LastCheck
from loopx.model import Record, UtcDatetime
from loopx.root import Layout
from loopx.root.hints import note_goal_changed
from loopx.storage.files import atomic_write_model, read_model_or_none
from loopx.storage.locks import locked


class TodoStatus(StrEnum):
    """Where a todo stands."""

    OPEN = "open"
    DONE = "done"
    DROPPED = "dropped"


class Todo(Record):
    """One item of a goal's todo list."""

    id: Annotated[str, Field(min_length=1, max_length=200)]
    text: Annotated[str, Field(max_length=4000)]
    status: TodoStatus = TodoStatus.OPEN


class Gate(Record):
    """A question only a human can answer; while open, no agent works on the goal."""

    id: int
    question: Annotated[str, Field(min_length=1, max_length=4000)]
    answer: str | None = None
    opened_at: UtcDatetime
    resolved_at: UtcDatetime | None = None
    opened_by: str = "human"  # "human", or the turn_key of the turn that asked

    @property
    def is_open(self) -> bool:
        """Whether the gate still waits for an answer."""
        return self.answer is None


class HostSession(Record):
    """A host CLI's resumable session (Codex thread, Claude session)."""

    kind: str
    session_id: str
    # The account the session belongs to (None: kept before sessions named theirs): a
    # session is resumed only on its own account and host kind.
    account: str | None = None
    turns: int = 0
    # The session-cumulative token counters the CLI last reported (codex reports
    # totals of the whole thread on resume); a turn's usage is the difference.
    reported_input_tokens: int = 0
    reported_output_tokens: int = 0
    # Likewise the session-cumulative cost and per-model token total (claude from 2.1.332
    # reports `total_cost_usd` and `modelUsage` of the whole resumed session).
    reported_cost_usd: float = 0.0
    reported_model_tokens: int = 0


# A state dated further than this into this clock's future means the clock is behind
# (loopx.clock.MAX_SKEW_S; clock imports this module).
_BEHIND_TOLERANCE_S: Final = 2.0


class GoalState(Record):
    """``goals/<id>/state.json``."""

    schema_version: Literal[1] = 1
    goal_id: str
    beliefs: list[str] = Field(default_factory=list)  # a stack: newest last
    priorities: list[str] = Field(default_factory=list)
    non_goals: list[str] = Field(default_factory=list)
    next_action: str | None = None
    todos: list[Todo] = Field(default_factory=list)
    gates: list[Gate] = Field(default_factory=list)
    last_applied_turn_key: str | None = None
    turn_seq: int = 0  # sequence number of the last applied turn
    host_session: HostSession | None = None
    # Set by scheduler_apply: no turn before this time (a `wait` result, failure backoff).
    next_eligible_at: UtcDatetime | None = None
    consecutive_failures: int = 0
    # The newest recorded done-check (every envelope carries it to the host).
    last_check: LastCheck | None = None
    # Hand-off (loopx.accounts.handoff): handed-off turns in all, and when the recent ones
    # were decided (the per-day cap counts them).
    handoffs: int = 0
    handed_off_at: list[UtcDatetime] = Field(default_factory=list)
    updated_at: UtcDatetime | None = None

    def eligible_at(self, now: datetime) -> datetime | None:
        """``next_eligible_at`` as every decision reads it; ``now`` when this clock is behind the state.

        A clock behind the state's own time (``updated_at`` in the future of
        ``now``: a backward step of the system clock) cannot tell how much of
        a recorded wait has passed, and waiting for the recorded instant
        stalled a goal that asked to wait 20 s for as long as the clock was
        behind. Such a wait counts as served. Pure; the
        instant is stable for every reader, whatever its ``now``, unlike a
        wait counted again from each reader's ``now``. (A process whose clock
        alone is behind the files' corrects it first: :func:`loopx.clock.calibrate`.)
        """
        at = self.next_eligible_at
        if at is None or self.updated_at is None:
            return at
        if (self.updated_at - now).total_seconds() > _BEHIND_TOLERANCE_S:
            return min(at, now)
        return at

    @property
    def open_gates(self) -> list[Gate]:
        """Gates still waiting for an answer."""
        return [g for g in self.gates if g.is_open]


def load_state(layout: Layout, goal_id: str) -> GoalState:
    """Read a goal's state; an absent file is a fresh state.

    Raises:
        CorruptFileError: the file is not valid JSON or not the schema.
    """
    return read_model_or_none(layout.state_file(goal_id), GoalState) or GoalState(goal_id=goal_id)


def update_state(
    layout: Layout, goal_id: str, change: Callable[[GoalState], GoalState]
) -> GoalState:
    """Read-modify-write a goal's state under its lock; returns the new state."""
    path = layout.state_file(goal_id)
    layout.ensure_goal_dirs(goal_id)
    with locked(path):
        new = change(load_state(layout, goal_id))
        atomic_write_model(path, new)
    note_goal_changed(layout, goal_id)  # lets status refreshes skip the unchanged goals
    return new
