"""The file kinds whose JSON Schema `loopx schema NAME` prints."""

from __future__ import annotations

from pydantic import BaseModel

from loopx.doctor import DoctorReport
from loopx.errors import UsageError
from loopx.headroom import HostHeadroom
from loopx.history import HistoryLine
from loopx.inspection import JournalInspection
from loopx.journal import TurnJournal
from loopx.lease import Lease
from loopx.ledger import SpendAggregate, SpendRecord
from loopx.protocol import Envelope, HostResult
from loopx.quota import QuotaDecision, QuotaReport
from loopx.recovery import QuarantineNote, RecoveryReport
from loopx.registry import Registry
from loopx.replay import ReplayReport, SetAsideNote
from loopx.state import GoalState
from loopx.status import ProbeObservation, StatusProjection
from loopx.status_cache import StatusIndex, StatusShard
from loopx.writeback import RunReport

SCHEMAS: dict[str, type[BaseModel]] = {
    "registry": Registry,
    "state": GoalState,
    "status": StatusProjection,
    "status-index": StatusIndex,
    "status-shard": StatusShard,
    "probe": ProbeObservation,
    "host-headroom": HostHeadroom,
    "quota-aggregate": SpendAggregate,
    "quota-decision": QuotaDecision,
    "quota-report": QuotaReport,
    "spend-record": SpendRecord,
    "envelope": Envelope,
    "result": HostResult,
    "journal": TurnJournal,
    "journal-inspection": JournalInspection,
    "lease": Lease,
    "run": RunReport,
    "history": HistoryLine,
    "recovery": RecoveryReport,
    "quarantine-note": QuarantineNote,
    "doctor": DoctorReport,
    "replay": ReplayReport,
    "set-aside-note": SetAsideNote,
}


def schema_model(name: str) -> type[BaseModel]:
    """The model behind schema ``name``.

    Raises:
        UsageError: unknown name.
    """
    try:
        return SCHEMAS[name]
    except KeyError:
        raise UsageError(
            f"unknown schema {name!r}", hint=f"choose one of: {', '.join(sorted(SCHEMAS))}"
        ) from None
