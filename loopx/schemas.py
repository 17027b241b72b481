"""The file kinds whose JSON Schema `loopx schema NAME` prints."""

from __future__ import annotations

from pydantic import BaseModel

from loopx.doctor import DoctorReport
from loopx.errors import UsageError
from loopx.history.line import HistoryLine
from loopx.quota.decision import QuotaDecision, QuotaReport
from loopx.quota.headroom import HostHeadroom
from loopx.quota.ledger import SpendAggregate, SpendRecord
from loopx.registry.catalog import GoalIndex
from loopx.registry.migrate import MigrationReport
from loopx.registry.model import Goal, RegistrySettings
from loopx.state import GoalState
from loopx.status.cache import StatusIndex, StatusShard
from loopx.status.projection import ProbeObservation, StatusProjection
from loopx.turn.inspection import JournalInspection
from loopx.turn.journal import TurnJournal
from loopx.turn.lease import Lease
from loopx.turn.protocol import Envelope, HostResult
from loopx.turn.recovery import QuarantineNote, RecoveryReport
from loopx.turn.replay import ReplayReport, SetAsideNote
from loopx.turn.writeback import RunReport

SCHEMAS: dict[str, type[BaseModel]] = {
    "registry": RegistrySettings,
    "goal": Goal,
    "goal-index": GoalIndex,
    "migration": MigrationReport,
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
