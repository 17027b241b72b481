"""The kernel's documents, by name: `loopx schema NAME` prints the JSON Schema of each.

Two kinds: the files under a runtime root (``FILES``) and the JSON that
commands print with ``--json`` and the HTTP server replies (``OUTPUTS``).
Each is a frozen :class:`loopx.model.Record` with an integer ``schema_version``.
The web front end's documents (the audit log, the dashboard's replies) are
listed by ``loopx.web.schemalist``, which the kernel never imports; the API
joins both lists into the one `loopx schema` knows (``loopx.api._schemas``).
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel

from loopx.accounts.accountfiles import ProviderHeaders
from loopx.accounts.handoffs import AccountHandoffs
from loopx.accounts.outputs import (
    AccountCheck,
    AccountDocument,
    AccountList,
    AccountShow,
    AccountSummary,
)
from loopx.accounts.records import Account, AccountState, RootBudget
from loopx.accounts.rollingbudget import AccountSpend
from loopx.batch.report import BatchReport, RunSummary
from loopx.doctor import DoctorReport
from loopx.errors import UsageError
from loopx.fleet import (
    AgentHeartbeat,
    AgentView,
    FleetRecord,
    ScaleRequest,
    ScaleResult,
    SupervisorStarted,
    SupervisorStatus,
    SupervisorStopped,
)
from loopx.history.logreader import LogEntry
from loopx.hostcanary import HostCheck, HostList, HostsFile
from loopx.notify.links import ServeAddress
from loopx.notify.outbox import Outbox
from loopx.notify.targets import NotifyConfig
from loopx.notify.targetviews import NotifyList, NotifyTestReport
from loopx.quota.aggregate import SpendAggregate
from loopx.quota.decision import QuotaDecision
from loopx.quota.headroom import HostHeadroom
from loopx.quota.ledger import SpendRecord
from loopx.quota.quotareport import QuotaReport
from loopx.registry.bulk import ImportReport
from loopx.registry.goal_index import GoalIndex
from loopx.registry.goalrecords import Goal
from loopx.registry.initialise import InitReport
from loopx.registry.migrate import MigrationReport, RegistryV1
from loopx.registry.plan import BatchPlan
from loopx.registry.views import GateDocument, GoalDocument, GoalList, GoalView, SessionReset
from loopx.registry.worktree_record import WorktreeRecord
from loopx.retention.archive import ArchiveResult
from loopx.retention.gc import GcReport
from loopx.retention.policy import RetentionSettings
from loopx.retention.space import SpaceReading
from loopx.root.held import RootMovedNote
from loopx.root.settings import RegistrySettings
from loopx.state import GoalState
from loopx.status.documents import ErrorReply, GoalDetail, GoalPage, GoalTurns, Health, StatusPage
from loopx.status.refresh import RefreshReport, StatusIndex
from loopx.status.view import ProbeObservation, StatusProjection
from loopx.turn.attempt import TurnAttempt, TurnReport
from loopx.turn.checkpoint import Checkpoint
from loopx.turn.clockshift import ClockShift
from loopx.turn.historyline import HistoryLine
from loopx.turn.inspection import JournalInspection, JournalList
from loopx.turn.journal import TurnJournal
from loopx.turn.lease import Lease
from loopx.turn.livetail import LiveOutput
from loopx.turn.protocol import Envelope, HostResult
from loopx.turn.recovery import QuarantineNote, RecoveryReport
from loopx.turn.replay import ReplayReport, SetAsideNote
from loopx.turn.runlog import RunReport
from loopx.turn.workdirfiles import WorkdirHold, WorkdirWait
from loopx.worktree.gitrun import GitRun
from loopx.worktree.mergejournal import MergeJournal
from loopx.worktree.show import WorktreeView

# Files under a runtime root (and the batch plan a person writes).
FILES: dict[str, type[BaseModel]] = {
    "registry": RegistrySettings,  # root-wide settings only
    "registry-v1": RegistryV1,  # the old single-file registry, migrated on first open
    "goal-file": Goal,  # goals/<id>/goal.json
    "goal-index": GoalIndex,
    "state": GoalState,
    "status": StatusProjection,
    "status-index": StatusIndex,  # the meta row of the status database
    "probe": ProbeObservation,
    "host-headroom": HostHeadroom,
    "quota-aggregate": SpendAggregate,
    "quota-decision": QuotaDecision,
    "spend-record": SpendRecord,
    "envelope": Envelope,
    "result": HostResult,
    "journal": TurnJournal,
    "lease": Lease,
    "run": RunReport,
    "history": HistoryLine,
    "quarantine-note": QuarantineNote,
    "set-aside-note": SetAsideNote,
    "clock-shift": ClockShift,  # clock-shifts.jsonl: a future-dated state dated back by doctor
    "supervisor": FleetRecord,
    "heartbeat": AgentHeartbeat,
    "scale-request": ScaleRequest,
    "batch-plan": BatchPlan,
    "batch-report": BatchReport,
    "live-output": LiveOutput,
    # One turn per workdir.
    "workdir-hold": WorkdirHold,  # workdirs/<key>.json
    "workdir-wait": WorkdirWait,  # goals/<id>/turns/.workdir-wait.json
    # Retention (docs/retention.md): the policy, a goal's checkpoint, the root's measured size.
    "retention": RetentionSettings,
    "checkpoint": Checkpoint,
    "space": SpaceReading,
    # Worktrees: goals/<id>/worktree.json and goals/<id>/merge.json (`goal merge --json` prints it).
    "worktree": WorktreeRecord,
    "merge-journal": MergeJournal,
    "worktree-git": GitRun,  # goals/<id>/worktree-git.json: the making's git, pid and start
    # Accounts: accounts/<name>/{account,state,spend,handoffs}.json, accounts/.root/budget.json
    "account": Account,
    "account-state": AccountState,
    "account-spend": AccountSpend,
    "account-handoffs": AccountHandoffs,
    "root-budget": RootBudget,
    # accounts/<name>/provider-headers.json: the rate-limit headers a sandboxed turn's proxy saw
    "provider-headers": ProviderHeaders,
    "root-moved-note": RootMovedNote,  # root-moved.json: why a supervisor stopped
    "notify-config": NotifyConfig,  # notify.json (0600: the URLs hold secrets)
    "notify-outbox": Outbox,  # notify.d/outbox.json
    "notify-serve": ServeAddress,  # notify.d/serve.json (a running serve's address, for links)
    "hosts": HostsFile,  # hosts.json: the canary's verdict per host kind
}

# What `--json` prints (beside the file kinds above: `status`, `probe`, `quota-decision`,
# `batch-report`) and what `loopx serve` replies.
OUTPUTS: dict[str, type[BaseModel]] = {
    "host-list": HostList,  # `loopx hosts --json`
    "host-check": HostCheck,  # `loopx hosts check KIND --json`
    "init": InitReport,
    "migration": MigrationReport,  # inside init (`init --upgrade`)
    "goal-import": ImportReport,
    "goal": GoalDocument,
    "goal-list": GoalList,
    "goal-view": GoalView,
    "session-reset": SessionReset,
    "gate": GateDocument,
    "quota-report": QuotaReport,
    "turn-attempt": TurnAttempt,
    "turn-report": TurnReport,  # inside turn-attempt
    "journal-list": JournalList,
    "journal-inspection": JournalInspection,
    "recovery": RecoveryReport,
    "refresh": RefreshReport,
    "archive": ArchiveResult,
    "doctor": DoctorReport,
    "replay": ReplayReport,
    "gc": GcReport,
    "supervisor-status": SupervisorStatus,
    "supervisor-run": RunSummary,
    "agent-view": AgentView,  # inside supervisor-status
    "supervisor-started": SupervisorStarted,
    "supervisor-stopped": SupervisorStopped,
    "supervisor-scale": ScaleResult,
    "http-status": StatusPage,
    "http-goals": GoalPage,
    "http-goal": GoalDetail,
    "http-turns": GoalTurns,
    "http-healthz": Health,
    "http-error": ErrorReply,
    "goal-worktree": WorktreeView,  # `loopx goal worktree --json`
    # `loopx account ... --json`; account-summary is also inside `status --json`.
    "account-document": AccountDocument,
    "account-list": AccountList,
    "account-show": AccountShow,
    "account-summary": AccountSummary,
    "account-check": AccountCheck,
    # `loopx logs --json`: one per line.
    "log-entry": LogEntry,
    "notify-list": NotifyList,  # `notify list|add|set|remove --json`
    "notify-test": NotifyTestReport,  # `notify test --json`
}

SCHEMAS: dict[str, type[BaseModel]] = FILES | OUTPUTS


def schema_model(name: str, schemas: Mapping[str, type[BaseModel]] = SCHEMAS) -> type[BaseModel]:
    """The model behind schema ``name`` of ``schemas`` (the API passes the whole list).

    Raises:
        UsageError: unknown name (the hint lists the names of ``schemas``).
    """
    try:
        return schemas[name]
    except KeyError:
        raise UsageError(
            f"unknown schema {name!r}", hint=f"choose one of: {', '.join(sorted(schemas))}"
        ) from None
