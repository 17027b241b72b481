"""What one attempt at a turn did: `loopx turn run-once --json` prints a :class:`TurnAttempt`.

The agent package runs the turn (:mod:`loopx.agents.turn`); the records live
in the kernel so `loopx schema` lists them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from loopx.model import Record
from loopx.quota.decision import QuotaDecision
from loopx.turn.failures import TurnFailure
from loopx.turn.journal import Phase
from loopx.turn.outcome import ResultKind, TurnStatus
from loopx.turn.recovery import RecoveryAction
from loopx.usage import Usage


class TurnReport(Record):
    """What one finished turn did (``loopx turn run-once --json`` prints it)."""

    schema_version: Literal[1] = 1
    goal_id: str
    agent_id: str
    turn_key: str
    seq: int
    epoch: int
    attempt: int
    status: TurnStatus  # for lease_lost: failed, and the journal was left to the new holder
    kind: ResultKind | None = None
    failure: TurnFailure | None = None
    summary: str = ""
    usage: Usage = Usage()
    completed_phases: list[Phase]
    recovered: list[RecoveryAction] = Field(default_factory=list)


class TurnAttempt(Record):
    """Whether a turn ran, and if not, why (not claimed; quota refused; stop requested)."""

    schema_version: Literal[1] = 1
    goal_id: str
    claimed: bool
    blocking_agent: str | None = None  # the live holder when not claimed
    quota: QuotaDecision | None = None
    report: TurnReport | None = None
    recovered: list[RecoveryAction] = Field(default_factory=list)
    # Not claimed because the goal's lock was busy and the caller asked not to wait.
    busy: bool = False
    # Not run because another goal's turn holds the workdir (that goal's id).
    workdir_busy: str | None = None
