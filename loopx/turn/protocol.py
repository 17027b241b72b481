"""The host protocol: the envelope a host reads and the result it writes (docs/host-protocol.md)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from loopx.model import Record, UtcDatetime
from loopx.state import GoalState, Todo
from loopx.turn.outcome import ResultKind

Text = Annotated[str, Field(max_length=4000)]
ShortList = Annotated[list[Text], Field(max_length=100)]


class StatePatch(Record):
    """Changes a turn makes to the goal state.

    ``beliefs`` are pushed onto the belief stack; ``priorities`` and
    ``non_goals`` replace the lists when given; ``todos`` are upserted by id.
    """

    beliefs: ShortList | None = None
    priorities: ShortList | None = None
    non_goals: ShortList | None = None
    todos: Annotated[list[Todo], Field(max_length=200)] | None = None


class HostResult(Record):
    """The JSON a host writes to ``LOOPX_RESULT_FILE`` (or prints as its last stdout line)."""

    schema_version: Literal[1] = 1
    kind: ResultKind
    summary: Text = ""
    next_action: Text | None = None
    evidence: ShortList = Field(default_factory=list)
    state_patch: StatePatch = Field(default_factory=StatePatch)
    wait_seconds: Annotated[float, Field(ge=0, le=30 * 24 * 3600)] | None = None
    question: Text | None = None
    # When present, must equal the envelope's turn_key (checked in `validation`).
    turn_key: str | None = None
    goal_id: str | None = None

    @model_validator(mode="after")
    def _kind_needs(self) -> HostResult:
        if self.kind is ResultKind.NEEDS_HUMAN and not self.question:
            msg = "a needs_human result must carry a question"
            raise ValueError(msg)
        return self


class Envelope(Record):
    """The JSON a host reads on stdin: who it is working for and what is known."""

    schema_version: Literal[1] = 1
    goal_id: str
    turn_key: str
    seq: int
    epoch: int
    attempt: int = 1
    objective: str
    workdir: str
    root: str
    result_file: str
    turn_timeout_s: float
    deadline_at: UtcDatetime
    state: GoalState  # includes host_session, answered gates, todos
    # Set on attempt N > 1: what the journal knows of attempt N-1's interruption
    interrupted: str | None = None
    # Set on a run of the stall ladder (loopx.turn.stall): why this run resumes or starts afresh
    stalled: str | None = None
    # Set when the turn runs on a fallback account: what the fresh session is told of it
    handoff: str | None = None
