"""Run history: one compact line per committed turn (``goals/<id>/history.jsonl``)."""

from __future__ import annotations

from typing import Literal

from loopx.model import Record, UtcDatetime
from loopx.quota.usage import Usage
from loopx.turn.failures import FailureReason
from loopx.turn.journal import TurnStatus
from loopx.turn.protocol import ResultKind


class HistoryLine(Record):
    """What the scheduler and status read about one finished turn.

    ``kind`` is the host's result kind for a committed turn, or None for a
    turn that ended ``failed``/``stopped`` (then ``failure`` names why).
    """

    schema_version: Literal[1] = 1
    turn_key: str
    goal_id: str
    seq: int
    epoch: int
    agent_id: str
    status: TurnStatus  # the journal's terminal status: committed, failed or stopped
    kind: ResultKind | None = None
    failure: FailureReason | None = None  # why, when status is failed or stopped
    summary: str = ""
    next_action: str | None = None
    usage: Usage = Usage()
    started_at: UtcDatetime
    ended_at: UtcDatetime
