"""The compute-quota ledger: one line per turn whose host ran (``goals/<id>/quota.jsonl``)."""

from __future__ import annotations

from typing import Literal

from loopx.model import Record, UtcDatetime
from loopx.usage import Usage


class SpendRecord(Record):
    """What one turn spent, keyed by ``turn_key`` so a replayed spend is skipped."""

    schema_version: Literal[1] = 1
    turn_key: str
    goal_id: str
    seq: int
    usage: Usage
    started_at: UtcDatetime
    ended_at: UtcDatetime
