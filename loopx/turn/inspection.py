"""``inspect(journal)``: a pure projection of one journal and what recovery must do with it.

The input is the journal's raw bytes plus where it was found (goal id and the
turn key its file name promises); nothing else is read. The same bytes always
give the same projection, which is what makes recovery deterministic.
"""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Final, Literal

from pydantic import ValidationError

from loopx.model import Record
from loopx.storage.files import describe_validation_error
from loopx.turn.failures import FailureReason
from loopx.turn.journal import (
    JOURNAL_SCHEMA_VERSION,
    PHASES,
    PHASES_BEFORE_CHECK,
    Phase,
    TurnJournal,
    make_turn_key,
)
from loopx.turn.outcome import TurnStatus

KNOWN_SCHEMA_VERSIONS: Final = frozenset({JOURNAL_SCHEMA_VERSION})


class ViolationCode(StrEnum):
    """Why a journal cannot be trusted as it is."""

    NOT_JSON = "not_json"  # truncated or not JSON at all
    UNSUPPORTED_VERSION = "unsupported_version"  # written by a LoopX whose schema we lack
    SCHEMA = "schema"  # JSON, but not the journal schema
    GOAL_MISMATCH = "goal_mismatch"  # the journal names another goal than its directory
    TURN_KEY_MISMATCH = "turn_key_mismatch"  # key differs from file name or (goal, seq, epoch)
    PHASE_ORDER = "phase_order"  # completed phases are not an ordered prefix
    STATUS_INCONSISTENT = "status_inconsistent"  # status disagrees with phases/result/failure


class Violation(Record):
    """One typed problem found in a journal."""

    code: ViolationCode
    message: str


class RecoveryDecision(StrEnum):
    """What recovery does with a journal (DESIGN.md, "Deterministic replay")."""

    NONE = "none"  # terminal: the tombstone stays
    RESUME = "resume"  # host_execute complete: finish the phases from journal data only
    RETRY_HOST = "retry_host"  # the host did not finish; the next claim runs it again
    # The host finished and its done-check is due but not recorded: the next
    # claim runs the check (a process, which the kernel does not start), never the host.
    RUN_CHECK = "run_check"
    FAIL = "fail"  # the host did not finish and no attempt is left: host_interrupted
    QUARANTINE = "quarantine"  # invalid: move to quarantine/ for a human


class JournalInspection(Record):
    """The projection ``inspect`` returns (``loopx journal inspect --json``)."""

    schema_version: Literal[1] = 1
    goal_id: str
    turn_key: str
    status: str | None = None
    seq: int | None = None
    epoch: int | None = None
    attempt: int | None = None
    max_host_attempts: int | None = None
    loopx_version: str | None = None
    replay_legal: bool
    journal_consistent: bool
    completed_phases: list[Phase]
    next_phase: Phase | None = None
    violations: list[Violation]
    recovery_decision: RecoveryDecision
    failure: FailureReason | None = None


def _ordered_prefix(phases: list[str]) -> tuple[list[Phase], bool]:
    """The longest ordered prefix of PHASES that ``phases`` spells, and whether it is all of it.

    A journal written before the done-check existed spells PHASES without
    ``done_check`` (``PHASES_BEFORE_CHECK``): that order is legal too.
    """
    best: list[Phase] = []
    for order in (PHASES, PHASES_BEFORE_CHECK):
        prefix: list[Phase] = []
        for want, got in zip(order, phases, strict=False):
            if got != want.value:
                break
            prefix.append(want)
        if len(prefix) > len(best):
            best = prefix
    return best, len(best) == len(phases)


def _all_phases(journal: TurnJournal) -> tuple[Phase, ...]:
    """The phases a finished journal holds: every one, or every one but done_check (older)."""
    return PHASES if Phase.DONE_CHECK in journal.completed_phases else PHASES_BEFORE_CHECK


def _consistency(journal: TurnJournal) -> list[Violation]:
    problems: list[str] = []
    done = set(journal.completed_phases)
    every = _all_phases(journal)
    if journal.status.terminal and len(done) != len(every):
        problems.append(f"status {journal.status} but only {len(done)} of {len(every)} phases done")
    if not journal.status.terminal and Phase.SCHEDULER_ACK in done:
        problems.append("scheduler_ack is complete but the status is still in_progress")
    if journal.status is TurnStatus.COMMITTED and (journal.result is None or journal.failure):
        problems.append("committed without a result, or with a failure")
    if journal.status in {TurnStatus.FAILED, TurnStatus.STOPPED} and journal.failure is None:
        problems.append(f"status {journal.status} without a failure reason")
    if Phase.HOST_EXECUTE in done and journal.outcome is None and journal.failure is None:
        problems.append("host_execute is complete but no host outcome is recorded")
    if Phase.TYPED_RESULT in done and journal.result is None and journal.failure is None:
        problems.append("typed_result is complete but there is neither a result nor a failure")
    if journal.attempt > journal.plan.max_host_attempts:
        problems.append(
            f"attempt {journal.attempt} exceeds max_host_attempts {journal.plan.max_host_attempts}"
        )
    return [Violation(code=ViolationCode.STATUS_INCONSISTENT, message=p) for p in problems]


def _identity(journal: TurnJournal, goal_id: str, turn_key: str) -> list[Violation]:
    out = []
    if journal.goal_id != goal_id:
        out.append(
            Violation(
                code=ViolationCode.GOAL_MISMATCH,
                message=f"journal names goal {journal.goal_id!r} but lives under goal {goal_id!r}",
            )
        )
    derived = make_turn_key(journal.goal_id, journal.seq, journal.epoch)
    if journal.turn_key != turn_key or journal.turn_key != derived:
        out.append(
            Violation(
                code=ViolationCode.TURN_KEY_MISMATCH,
                message=f"turn_key {journal.turn_key!r}: file name says {turn_key!r}, "
                f"(goal, seq, epoch) derive {derived!r}",
            )
        )
    return out


def _invalid(goal_id: str, turn_key: str, violation: Violation) -> JournalInspection:
    return JournalInspection(
        goal_id=goal_id,
        turn_key=turn_key,
        replay_legal=False,
        journal_consistent=False,
        completed_phases=[],
        violations=[violation],
        recovery_decision=RecoveryDecision.QUARANTINE,
    )


def _invalid_pair(
    goal_id: str, turn_key: str, violation: Violation
) -> tuple[JournalInspection, None]:
    return _invalid(goal_id, turn_key, violation), None


def inspect(raw: bytes, *, goal_id: str, turn_key: str) -> JournalInspection:
    """Project a journal and decide its recovery. Pure: no files, clock or processes.

    Args:
        raw: the journal file's bytes.
        goal_id: the goal whose ``turns/`` directory holds the file.
        turn_key: the key the file name promises (name without ``.json``).

    Returns:
        The projection; never raises for bad input (bad input is a violation).

    """
    return inspect_parsed(raw, goal_id=goal_id, turn_key=turn_key)[0]


def inspect_parsed(
    raw: bytes, *, goal_id: str, turn_key: str
) -> tuple[JournalInspection, TurnJournal | None]:
    """:func:`inspect`, with the journal it parsed (None when the file is not one). Pure.

    For a reader of many journals (replay), which would otherwise parse each twice.
    """
    try:
        document = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        what = "empty" if not raw.strip() else f"truncated or not JSON ({e})"
        return _invalid_pair(
            goal_id, turn_key, Violation(code=ViolationCode.NOT_JSON, message=what)
        )
    if not isinstance(document, dict):
        return _invalid_pair(
            goal_id, turn_key, Violation(code=ViolationCode.NOT_JSON, message="not a JSON object")
        )
    version = document.get("schema_version")
    # A hostile file may hold any JSON here (a list is unhashable, true equals 1).
    if type(version) is not int or version not in KNOWN_SCHEMA_VERSIONS:
        writer = document.get("loopx_version", "an unknown LoopX version")
        return _invalid_pair(
            goal_id,
            turn_key,
            Violation(
                code=ViolationCode.UNSUPPORTED_VERSION,
                message=f"schema_version {version!r} written by LoopX {writer}; this LoopX "
                f"reads {sorted(KNOWN_SCHEMA_VERSIONS)}: upgrade LoopX to recover it",
            ),
        )
    phases = document.get("completed_phases")
    if isinstance(phases, list):
        _prefix, ordered = _ordered_prefix([str(p) for p in phases])
        if not ordered:
            return _invalid_pair(
                goal_id,
                turn_key,
                Violation(
                    code=ViolationCode.PHASE_ORDER,
                    message=f"completed_phases {phases} is not an ordered prefix of "
                    f"{[p.value for p in PHASES]}",
                ),
            )
    try:
        journal = TurnJournal.model_validate(document)
    except ValidationError as e:
        return _invalid_pair(
            goal_id,
            turn_key,
            Violation(code=ViolationCode.SCHEMA, message=describe_validation_error(e)),
        )
    return inspect_journal(journal, goal_id=goal_id, turn_key=turn_key), journal


def inspect_journal(journal: TurnJournal, *, goal_id: str, turn_key: str) -> JournalInspection:
    """Like :func:`inspect` for an already parsed journal. Pure."""
    violations = [*_identity(journal, goal_id, turn_key), *_consistency(journal)]
    done = journal.completed_phases
    next_phase = next((p for p in _all_phases(journal) if p not in done), None)
    if next_phase is Phase.DURABLE_WRITEBACK and Phase.DONE_CHECK not in done:
        next_phase = Phase.DONE_CHECK
    if violations:
        decision = RecoveryDecision.QUARANTINE
    elif journal.status.terminal:
        decision = RecoveryDecision.NONE
    elif journal.check_due():
        decision = RecoveryDecision.RUN_CHECK
    elif Phase.HOST_EXECUTE in done:
        decision = RecoveryDecision.RESUME
    elif journal.attempt < journal.plan.max_host_attempts:
        decision = RecoveryDecision.RETRY_HOST
    else:
        decision = RecoveryDecision.FAIL
    return JournalInspection(
        goal_id=goal_id,
        turn_key=turn_key,
        status=journal.status.value,
        seq=journal.seq,
        epoch=journal.epoch,
        attempt=journal.attempt,
        max_host_attempts=journal.plan.max_host_attempts,
        loopx_version=journal.loopx_version,
        replay_legal=decision is not RecoveryDecision.QUARANTINE,
        journal_consistent=not violations,
        completed_phases=list(done),
        next_phase=None if journal.status.terminal else next_phase,
        violations=violations,
        recovery_decision=decision,
        failure=journal.failure.reason if journal.failure else None,
    )


def decision_reason(view: JournalInspection) -> str:
    """Why recovery decides what it does with a journal, in words (never empty). Pure."""
    attempts = f"{view.attempt} of max_host_attempts={view.max_host_attempts}"
    match view.recovery_decision:
        case RecoveryDecision.NONE:
            return f"the journal is {view.status}: its tombstone stays as it is"
        case RecoveryDecision.RESUME:
            return f"resumed from {view.next_phase}: the host had finished, so it is not run again"
        case RecoveryDecision.RETRY_HOST:
            return f"host attempt {attempts} was interrupted; the next claim runs it again"
        case RecoveryDecision.RUN_CHECK:
            return (
                "the host finished but its done-check result was not recorded; the next "
                "claim runs the check (never the host) again"
            )
        case RecoveryDecision.FAIL:
            return (
                f"the host was interrupted at every attempt ({attempts}), so none is left: "
                "the turn ends failed (host_interrupted)"
            )
        case RecoveryDecision.QUARANTINE:
            return "; ".join(v.message for v in view.violations) or "the journal is invalid"


class JournalList(Record):
    """`loopx journal list --json`: the inspection of each of a goal's journals, oldest first."""

    schema_version: Literal[1] = 1
    goal_id: str
    journals: list[JournalInspection]
