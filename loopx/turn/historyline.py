"""Run History: one compact line per finished turn (``goals/<id>/history.jsonl``).

The model and its pure builder from a settled journal; :mod:`loopx.history.reader`
reads the file, :mod:`loopx.turn.writeback` appends to it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from loopx.accounts.records import account_of
from loopx.model import Record, UtcDatetime
from loopx.turn.failures import FailureReason
from loopx.turn.outcome import ResultKind, TurnStatus
from loopx.usage import Usage

if TYPE_CHECKING:  # readers of history (status) need not import the journal and its layers
    from loopx.turn.journal import TurnJournal


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
    failure_message: str = ""  # why a failed turn failed (bounded); the run log has the rest
    next_action: str | None = None
    usage: Usage = Usage()
    started_at: UtcDatetime
    ended_at: UtcDatetime
    # What the turn ran on: its account and host kind, and whether it was handed off there
    # (None: a line written before lines named them).
    account: str | None = None
    host_kind: str | None = None
    handed_off: bool = False


FAILURE_MESSAGE_CHARS = 300  # a history line stays compact; runs/<seq>.md keeps it whole


def history_line(journal: TurnJournal) -> HistoryLine:
    """The compact history line of a settled journal. Pure."""
    from loopx.turn.journal import final_status  # noqa: PLC0415 - see the imports above

    good = journal.good_result
    return HistoryLine(
        turn_key=journal.turn_key,
        goal_id=journal.goal_id,
        seq=journal.seq,
        epoch=journal.epoch,
        agent_id=journal.agent_id,
        status=final_status(journal),
        kind=good.kind if good else None,
        failure=journal.failure.reason if journal.failure else None,
        failure_message=journal.failure.message[:FAILURE_MESSAGE_CHARS] if journal.failure else "",
        summary=good.summary if good else "",
        next_action=good.next_action if good else None,
        usage=journal.usage,
        started_at=journal.created_at,
        ended_at=journal.turn_end,
        account=account_of(journal.plan.account, journal.plan.host_kind),
        host_kind=journal.plan.host_kind,
        handed_off=journal.plan.handoff is not None,
    )
