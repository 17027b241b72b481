"""Turn journals: one schema-validated file per turn, rewritten as its phases complete.

``goals/<id>/turns/<turn_key>.json`` is the source of truth of a turn. It is
created (``in_progress``) before the host runs, rewritten atomically once the
host's outcome is known, and once more when the turn ends
(``committed``/``failed``/``stopped``); then it stays as a tombstone. Every
write happens inside the holder's :class:`~loopx.turn.fencing.Fence`, so a holder
whose lease was taken over writes nothing.
"""

from __future__ import annotations

import os
import re
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Final, Literal

from pydantic import Field

from loopx.accounts.handoff import Handoff
from loopx.accounts.windows import UsageWindow
from loopx.donecheck import CheckResult, DoneCheckSpec
from loopx.errors import JournalExistsError
from loopx.model import Record, UtcDatetime
from loopx.quota.decision import QuotaDecision
from loopx.registry.goalrecords import HostKindName
from loopx.root import Layout
from loopx.sandbox import NetworkReport, SandboxSpec
from loopx.state import HostSession
from loopx.storage.files import atomic_write_model, exclusive_create, read_model
from loopx.turn.failures import FailureReason, TurnFailure
from loopx.turn.fencing import Fence
from loopx.turn.outcome import ResultKind, TurnStatus
from loopx.turn.protocol import Envelope, HostResult
from loopx.turn.stall import StallLadder
from loopx.usage import Usage

JOURNAL_SCHEMA_VERSION: Final = 1
OUTPUT_LIMIT_BYTES: Final = 1024 * 1024  # raw stdout/stderr kept per stream


class Phase(StrEnum):
    """The phases of a turn, in their only legal order (see :data:`PHASES`)."""

    HOST_EXECUTE = "host_execute"
    TYPED_RESULT = "typed_result"
    VALIDATION = "validation"
    DONE_CHECK = "done_check"  # the goal's check; a no-op without one (or not due)
    DURABLE_WRITEBACK = "durable_writeback"
    QUOTA_SPEND = "quota_spend"
    SCHEDULER_APPLY = "scheduler_apply"
    SCHEDULER_ACK = "scheduler_ack"


PHASES: Final = tuple(Phase)
# The phase order of a journal written before the done-check existed (it is still legal).
PHASES_BEFORE_CHECK: Final = tuple(p for p in Phase if p is not Phase.DONE_CHECK)


_TURN_KEY = re.compile(r"^(?P<goal>.+)-t(?P<seq>\d{6,})-e(?P<epoch>\d+)$")


def make_turn_key(goal_id: str, seq: int, epoch: int) -> str:
    """The turn key of turn ``seq`` of ``goal_id`` under lease ``epoch``. Deterministic.

    It is a safe file name (goal ids are) and unique per goal and root: the
    suffix is parsed from the right, so no goal id can forge another's key.
    """
    return f"{goal_id}-t{seq:06d}-e{epoch}"


def parse_turn_key(turn_key: str) -> tuple[str, int, int] | None:
    """``(goal_id, seq, epoch)`` of a turn key, or None if it is not one."""
    match = _TURN_KEY.match(turn_key)
    if match is None:
        return None
    return match["goal"], int(match["seq"]), int(match["epoch"])


class TurnPlan(Record):
    """What the turn intends, fixed when the journal is created."""

    envelope: Envelope
    host_kind: HostKindName
    argv: list[str]
    quota: QuotaDecision | None = None
    max_host_attempts: Annotated[int, Field(ge=1)] = 2
    turn_timeout_s: float
    max_rss_mb: int | None = None
    # The goal's failure streak when the turn was planned: scheduler_apply sets
    # the new streak from it, so replaying the phase never counts twice.
    prior_failures: Annotated[int, Field(ge=0)] = 0
    # The goal's done-check when the turn was planned (None: the goal has none).
    done_check: DoneCheckSpec | None = None
    # The account the turn runs on and the resume policy in force: what the turn
    # does to its account is derived from the journal alone. None: the host kind's default.
    account: str | None = None
    on_limit: Literal["wait", "gate", "stop"] = "wait"
    max_limit_waits: Annotated[int, Field(ge=0)] | None = None
    # The account's --max-overloads when the turn was planned: the gate after N overloads in a
    # row is decided from the journal, so editing the account later never changes a replay.
    max_overloads: Annotated[int, Field(ge=1, le=1000)] = 5
    # Set when the turn runs on a fallback account (``account`` and ``host_kind`` name it):
    # the hand-off step's decision (loopx.turn.steps.handing).
    handoff: Handoff | None = None
    # The goal may hand off (it names fallbacks and is not pinned): a usage limit then
    # holds its account, not the goal (loopx.turn.phases.schedule).
    may_hand_off: bool = False
    # The goal's sandbox when the turn was planned: its host and check run inside it.
    sandbox: SandboxSpec | None = None


class HostOutcome(Record):
    """What ``host_execute`` observed: exit, bounded raw output, and the adapter's reading."""

    attempt: int = 1
    pid: int | None = None
    exit_code: int | None = None
    signal: int | None = None
    # Why LoopX ended the run: turn_timeout, quota_memory_exceeded, stopped, host_stalled.
    killed: FailureReason | None = None
    stdout: str = ""
    stderr: str = ""
    stdout_dropped: int = 0
    stderr_dropped: int = 0
    result_file_text: str | None = None
    # The adapter's interpretation (pure, made right after the host exited).
    result: HostResult | None = None
    failure: TurnFailure | None = None
    # A sandboxed run: what its proxy let through, refused and carried.
    network: NetworkReport | None = None
    session: HostSession | None = None
    # The provider's usage windows the CLI reported in this run (its output, its session file).
    windows: list[UsageWindow] = Field(default_factory=list)
    started_at: UtcDatetime
    ended_at: UtcDatetime


class TurnJournal(Record):
    """``goals/<id>/turns/<turn_key>.json``."""

    schema_version: Literal[1] = 1
    loopx_version: str
    goal_id: str
    agent_id: str
    turn_key: str
    seq: Annotated[int, Field(ge=1)]
    epoch: Annotated[int, Field(ge=1)]
    status: TurnStatus = TurnStatus.IN_PROGRESS
    attempt: Annotated[int, Field(ge=1)] = 1  # host runs started for this turn
    plan: TurnPlan
    completed_phases: list[Phase] = Field(default_factory=list)
    # The rows of the turn's table of steps (loopx.turn.steps.table) this journal records as
    # done; a row without a phase of its own is resumed by its name here. Empty in journals
    # written before the table.
    completed_steps: list[str] = Field(default_factory=list)
    outcome: HostOutcome | None = None
    result: HostResult | None = None  # set by typed_result
    failure: TurnFailure | None = None
    usage: Usage = Field(default_factory=Usage)
    # What the done_check phase recorded (None: no check ran in this turn).
    check: CheckResult | None = None
    # The host's result as it reported it, when a failing check turned its `completed`
    # into `progress` (``result`` then holds the result the turn commits).
    reported_result: HostResult | None = None
    # The stall ladder's record when the host stalled (None: it never did).
    stall: StallLadder | None = None
    created_at: UtcDatetime
    updated_at: UtcDatetime
    ended_at: UtcDatetime | None = None

    def done(self, phase: Phase) -> bool:
        """Whether ``phase`` is recorded as complete."""
        return phase in self.completed_phases

    def with_phases(self, *phases: Phase, now: datetime) -> TurnJournal:
        """A copy with ``phases`` appended (each once, in order)."""
        added = [p for p in phases if p not in self.completed_phases]
        return self.model_copy(
            update={"completed_phases": [*self.completed_phases, *added], "updated_at": now}
        )

    def with_step(self, name: str) -> TurnJournal:
        """A copy recording the step ``name`` as done (durable with the next journal write)."""
        if name in self.completed_steps:
            return self
        return self.model_copy(update={"completed_steps": [*self.completed_steps, name]})

    @property
    def turn_end(self) -> datetime:
        """When the turn's work ended: the host's end, else the journal's creation.

        Effects derived from a journal (history times, next eligible time) use
        this instead of the clock, so replaying them gives the same files.
        """
        return self.outcome.ended_at if self.outcome is not None else self.created_at

    def check_due(self) -> bool:
        """Whether the done_check phase must run the goal's check before the turn goes on. Pure.

        It must when the goal has a check, the host finished with a good
        result (``completed``, or any with ``every_turn``), and no check result
        is recorded yet. Before ``validation`` the host's own reading stands in
        for the settled result (the live turn always settles first).
        """
        spec = self.plan.done_check
        if (
            spec is None
            or self.status.terminal
            or Phase.HOST_EXECUTE not in self.completed_phases
            or self.done(Phase.DONE_CHECK)
            or self.done(Phase.DURABLE_WRITEBACK)
        ):
            return False
        if self.done(Phase.VALIDATION):
            result = self.good_result
        elif self.outcome is None or self.outcome.killed is not None or self.failure is not None:
            result = None
        else:
            result = self.outcome.result if self.outcome.failure is None else None
        return result is not None and (spec.every_turn or result.kind is ResultKind.COMPLETED)

    @property
    def good_result(self) -> HostResult | None:
        """The host's result of a turn that did not fail; None for a failed (or unfinished) one."""
        return self.result if self.failure is None else None


# --- files -------------------------------------------------------------------------------------


def journal_path(layout: Layout, goal_id: str, turn_key: str) -> Path:
    """``goals/<id>/turns/<turn_key>.json``."""
    return layout.turns_dir(goal_id) / f"{turn_key}.json"


def result_path(layout: Layout, goal_id: str, turn_key: str) -> Path:
    """Where the host writes its result (``LOOPX_RESULT_FILE``): ``goals/<id>/results/``."""
    return layout.goal_dir(goal_id) / "results" / f"{turn_key}.json"


def create_journal(layout: Layout, journal: TurnJournal, fence: Fence) -> None:
    """Create a new journal exclusively, inside the fence.

    Raises:
        LeaseLostError: the fence's epoch is stale.
        JournalExistsError: a journal with this key exists.

    """
    path = journal_path(layout, journal.goal_id, journal.turn_key)
    data = journal.model_dump_json(indent=2).encode() + b"\n"
    with fence.held():
        if not exclusive_create(path, data):
            raise JournalExistsError(path)


def write_journal(layout: Layout, journal: TurnJournal, fence: Fence) -> None:
    """Atomically rewrite a journal, inside the fence.

    Raises:
        LeaseLostError: the fence's epoch is stale.

    """
    with fence.held():
        write_journal_unfenced(layout, journal)


def write_journal_unfenced(layout: Layout, journal: TurnJournal, *, sync_dir: bool = True) -> None:
    """Rewrite a journal; the caller already holds the fence (inside ``fence.held()``).

    ``sync_dir=False`` (the terminal rewrite only) fsyncs the new content but
    not the directory entry: see :func:`loopx.turn.phases.finish` for why that is
    enough.
    """
    atomic_write_model(
        journal_path(layout, journal.goal_id, journal.turn_key), journal, sync_dir=sync_dir
    )


def read_journal(path: Path) -> TurnJournal:
    """Read and validate a journal file.

    Raises:
        FileNotFoundError: no such file.
        CorruptFileError: not JSON or not the schema.

    """
    return read_model(path, TurnJournal)


def journal_files(layout: Layout, goal_id: str) -> list[Path]:
    """A goal's journal files, oldest turn first (by the seq in the name)."""
    directory = layout.turns_dir(goal_id)
    try:
        names = [n for n in os.listdir(directory) if n.endswith(".json") and not n.startswith(".")]
    except FileNotFoundError:
        return []

    def order(name: str) -> tuple[int, int, str]:
        parsed = parse_turn_key(name[: -len(".json")])
        return (parsed[1], parsed[2], name) if parsed else (-1, -1, name)

    return [directory / n for n in sorted(names, key=order)]


def newest_journal(layout: Layout, goal_id: str) -> Path | None:
    """The last of :func:`journal_files` (None if there is none), without sorting them all.

    A turn asks only for the newest journal; a goal's ``turns/`` keeps every
    tombstone, so this stays one directory listing and one parse per name.
    """
    directory = layout.turns_dir(goal_id)
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return None
    best: tuple[int, int, str] | None = None
    for name in names:
        if not name.endswith(".json") or name.startswith("."):
            continue
        parsed = parse_turn_key(name[: -len(".json")])
        order = (parsed[1], parsed[2], name) if parsed else (-1, -1, name)
        if best is None or order > best:
            best = order
    return directory / best[2] if best is not None else None


def last_seq(layout: Layout, goal_id: str) -> int:
    """The highest turn seq named by a goal's journal files (0 if none)."""
    newest = newest_journal(layout, goal_id)
    parsed = parse_turn_key(newest.name[: -len(".json")]) if newest is not None else None
    return parsed[1] if parsed is not None else 0


def final_status(journal: TurnJournal) -> TurnStatus:
    """The terminal status the journal's data implies. Pure."""
    if journal.failure is None:
        return TurnStatus.COMMITTED
    if journal.failure.reason is FailureReason.STOPPED:
        return TurnStatus.STOPPED
    return TurnStatus.FAILED
