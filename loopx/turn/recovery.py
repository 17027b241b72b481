"""``recover(layout)``: apply every journal's recovery decision; deterministic and idempotent.

Per goal with unfinished or invalid journals, recovery claims the goal's
lease (skipping goals a live agent holds: that agent finishes its own turn),
then, oldest journal first:

* ``resume``: :func:`loopx.turn.phases.finish` from the first missing phase, using
  journal data only; the host never runs again;
* ``fail``: the host was interrupted and no attempt is left: the journal ends
  ``failed`` (``host_interrupted``) through the same phases;
* ``run_check``: the host finished and its done-check is due but not recorded:
  left ``in_progress`` like ``retry_host``; the next claim runs the check, never
  the host. Listed as ``check_pending``;
* ``retry_host``: left ``in_progress`` on purpose. Running a host needs a
  process, which the kernel does not start: the next claim of the goal
  (:func:`loopx.agents.turn.run_one_turn`) runs the host again under the same
  journal and turn key with ``attempt`` + 1. Listed as ``retry_pending``;
* ``quarantine``: the file moves to ``quarantine/<goal>/`` next to a
  ``.reason.json`` naming every violation; never deleted.
"""

from __future__ import annotations

import os
import socket
from datetime import datetime
from pathlib import Path
from typing import Literal

from pydantic import Field

from loopx.errors import CorruptFileError, LeaseLostError, LoopxError
from loopx.fleet import FleetRecord, FleetState, died
from loopx.ids import is_valid_goal_id
from loopx.log import get_logger
from loopx.model import Record, UtcDatetime, utcnow
from loopx.root import Layout
from loopx.storage.dirs import ensure_dir, fsync_dir
from loopx.storage.files import atomic_write_model, read_bytes, read_model_or_none
from loopx.turn.failures import FailureReason, TurnFailure
from loopx.turn.fencing import Fence
from loopx.turn.inspection import (
    JournalInspection,
    JournalList,
    RecoveryDecision,
    Violation,
    decision_reason,
    inspect,
)
from loopx.turn.journal import Phase, TurnJournal, journal_files, newest_journal
from loopx.turn.lease import claim, clear_dead_lease, fence_of, release
from loopx.turn.outcome import TurnStatus
from loopx.turn.phases import finish
from loopx.turn.writeback import restore_run_log

log = get_logger(__name__)

RECOVERY_AGENT_ID = "recovery"


class RecoveryAction(Record):
    """What recovery did with one journal."""

    goal_id: str
    turn_key: str
    decision: RecoveryDecision
    status: TurnStatus | None = None  # the journal's status afterwards (None when quarantined)
    detail: str = ""
    quarantined_to: str | None = None


class RecoveryReport(Record):
    """``loopx recover --json``."""

    schema_version: Literal[1] = 1
    actions: list[RecoveryAction]
    quarantined: list[str]  # paths of journals moved aside for a human
    retry_pending: list[str]  # turn keys whose host the next claim runs again
    check_pending: list[str] = Field(
        default_factory=list
    )  # turn keys whose done-check the next claim runs
    busy_goals: list[str]  # goals a live agent holds; it finishes its own journals
    errors: list[str]  # goals recovery could not process, with the reason
    merges: list[str] = Field(default_factory=list)  # goals whose killed merge was finished
    merges_cancelled: list[str] = Field(default_factory=list)  # "goal: why" of merges cancelled
    merges_waiting: list[str] = Field(default_factory=list)  # "goal: holder" of merges left

    @property
    def clean(self) -> bool:
        """Whether nothing needs a human."""
        return not self.quarantined and not self.errors


class QuarantineNote(Record):
    """``quarantine/<goal>/<file>.reason.json``: why a journal was moved aside."""

    schema_version: Literal[1] = 1
    goal_id: str
    original_path: str
    turn_key: str
    violations: list[Violation]
    quarantined_at: UtcDatetime


def quarantine(layout: Layout, path: Path, inspection: JournalInspection, *, now: datetime) -> Path:
    """Move a journal to ``quarantine/<goal>/`` beside a reason file; return its new path.

    The reason is written first: a crash before the move leaves the journal in
    place, and the next recovery quarantines it again.
    """
    target_dir = ensure_dir(ensure_dir(layout.quarantine_dir) / inspection.goal_id)
    target = target_dir / path.name
    note = QuarantineNote(
        goal_id=inspection.goal_id,
        original_path=str(path),
        turn_key=inspection.turn_key,
        violations=inspection.violations,
        quarantined_at=now,
    )
    atomic_write_model(target_dir / f"{path.name}.reason.json", note)
    if target.exists():  # an earlier quarantine of the same name: keep both
        target = target_dir / f"{path.stem}.{int(now.timestamp())}{path.suffix}"
    os.replace(path, target)
    fsync_dir(path.parent)
    fsync_dir(target_dir)
    log.warning(
        "journal_quarantined",
        goal_id=inspection.goal_id,
        turn_key=inspection.turn_key,
        path=str(path),
        to=str(target),
    )
    return target


def interrupted(journal: TurnJournal, *, now: datetime) -> TurnJournal:
    """The journal of a host that died with no attempt left, ready to finish ``failed``. Pure."""
    failure = TurnFailure.of(
        FailureReason.HOST_INTERRUPTED,
        f"the host was interrupted {journal.attempt} time(s); "
        f"max_host_attempts={journal.plan.max_host_attempts} reached",
    )
    return journal.model_copy(update={"failure": failure}).with_phases(
        Phase.HOST_EXECUTE, Phase.TYPED_RESULT, Phase.VALIDATION, now=now
    )


# What recovery leaves as it is: a tombstone, or a journal for the next claim.
_LEFT: frozenset[RecoveryDecision] = frozenset(
    {RecoveryDecision.NONE, RecoveryDecision.RETRY_HOST, RecoveryDecision.RUN_CHECK}
)


def recover_journal(
    layout: Layout, path: Path, fence: Fence, *, now: datetime
) -> tuple[RecoveryAction, TurnJournal | None]:
    """Inspect one journal file and apply its decision under ``fence``.

    Returns:
        What was done, and the journal when it is still ``in_progress`` and
        waits for a host retry (else None).

    Raises:
        LeaseLostError: the fence went stale.

    """
    goal_id = fence.goal_id
    turn_key = path.name.removesuffix(".json")
    raw = read_bytes(path)
    view = inspect(raw, goal_id=goal_id, turn_key=turn_key)
    decision = view.recovery_decision
    if decision is RecoveryDecision.QUARANTINE:
        with fence.held():
            moved = quarantine(layout, path, view, now=now)
        return RecoveryAction(
            goal_id=goal_id,
            turn_key=turn_key,
            decision=decision,
            detail=decision_reason(view),
            quarantined_to=str(moved),
        ), None
    journal = TurnJournal.model_validate_json(raw)
    if decision in _LEFT:
        action = RecoveryAction(
            goal_id=goal_id,
            turn_key=turn_key,
            decision=decision,
            status=journal.status,
            detail=decision_reason(view),
        )
        return action, None if decision is RecoveryDecision.NONE else journal
    if decision is RecoveryDecision.FAIL:
        journal = interrupted(journal, now=now)
    done = finish(layout, journal, fence, now=now)
    log.info(
        "journal_recovered",
        goal_id=goal_id,
        turn_key=turn_key,
        decision=decision,
        status=done.status,
    )
    return RecoveryAction(
        goal_id=goal_id,
        turn_key=turn_key,
        decision=decision,
        status=done.status,
        detail=decision_reason(view),
    ), None


def inspect_file(path: Path, *, goal_id: str) -> JournalInspection:
    """Read and inspect the journal at ``path`` (its turn key is the file name).

    Raises:
        FileNotFoundError: there is no such journal.

    """
    return inspect(read_bytes(path), goal_id=goal_id, turn_key=path.name.removesuffix(".json"))


def inspect_goal_journals(layout: Layout, goal_id: str) -> JournalList:
    """Every journal of ``goal_id``, inspected, oldest first (`loopx journal list`)."""
    return JournalList(
        goal_id=goal_id,
        journals=[inspect_file(p, goal_id=goal_id) for p in journal_files(layout, goal_id)],
    )


def needs_recovery(layout: Layout, goal_id: str) -> list[Path]:
    """A goal's journal files that are not plain terminal tombstones (read-only)."""
    out = []
    for path in journal_files(layout, goal_id):
        try:
            view = inspect_file(path, goal_id=goal_id)
        except FileNotFoundError:
            continue
        if view.recovery_decision is not RecoveryDecision.NONE:
            out.append(path)
    return out


def recover_goal(
    layout: Layout, goal_id: str, fence: Fence, *, now: datetime, paths: list[Path] | None = None
) -> tuple[list[RecoveryAction], TurnJournal | None]:
    """Recover a goal's journals (all, or ``paths``) under a held fence, oldest first.

    Returns:
        The actions, and the journal waiting for a host retry, if any.

    """
    actions: list[RecoveryAction] = []
    pending = None
    for path in paths if paths is not None else needs_recovery(layout, goal_id):
        action, waiting = recover_journal(layout, path, fence, now=now)
        actions.append(action)
        pending = waiting or pending
    return actions, pending


def settle_dead_supervisor(layout: Layout, *, now: datetime) -> FleetRecord | None:
    """Mark a supervisor recorded as active but gone as ``stopped``; return the old record.

    ``doctor`` reports such a record (``supervisor_dead``) and status would
    otherwise have to say so for ever; its turns are recovered like any other.
    """
    try:
        record = read_model_or_none(layout.supervisor_file, FleetRecord)
    except CorruptFileError:
        return None
    if record is None or not died(record, hostname=socket.gethostname()):
        return None
    stopped = record.model_copy(
        update={
            "state": FleetState.STOPPED,
            "exit_code": record.exit_code,
            "updated_at": now,
            "slots": [
                s.model_copy(update={"pid": None, "pid_started_at": None}) for s in record.slots
            ],
        }
    )
    atomic_write_model(layout.supervisor_file, stopped)
    log.warning("dead_supervisor_settled", pid=record.pid, was=record.state)
    return record


def recover(layout: Layout, *, now: datetime | None = None) -> RecoveryReport:
    """Recover every goal of the root. Idempotent: running it again changes nothing more."""
    now = now or utcnow()
    settle_dead_supervisor(layout, now=now)
    actions: list[RecoveryAction] = []
    busy: list[str] = []
    errors: list[str] = []
    goals_dir = layout.goals_dir
    names = sorted(os.listdir(goals_dir)) if goals_dir.is_dir() else []
    for goal_id in names:
        if not is_valid_goal_id(goal_id) or not (goals_dir / goal_id).is_dir():
            continue
        try:
            paths = needs_recovery(layout, goal_id)
            if not paths:
                clear_dead_lease(layout, goal_id)
                if (newest := newest_journal(layout, goal_id)) is not None:
                    restore_run_log(layout, newest)
                continue
            claimed = claim(layout, goal_id, agent_id=RECOVERY_AGENT_ID, now=utcnow())
            if claimed.lease is None:
                busy.append(goal_id)
                continue
            try:
                done, _ = recover_goal(layout, goal_id, fence_of(layout, claimed.lease), now=now)
                actions += done
            finally:
                release(layout, claimed.lease)
        except LeaseLostError as e:
            errors.append(f"{goal_id}: {e.message}")
        except LoopxError as e:
            errors.append(f"{goal_id}: {e.message}")
    return RecoveryReport(
        actions=actions,
        quarantined=[a.quarantined_to for a in actions if a.quarantined_to],
        retry_pending=[a.turn_key for a in actions if a.decision is RecoveryDecision.RETRY_HOST],
        check_pending=[a.turn_key for a in actions if a.decision is RecoveryDecision.RUN_CHECK],
        busy_goals=busy,
        errors=errors,
    )


__all__ = [
    "QuarantineNote",
    "RecoveryAction",
    "RecoveryReport",
    "quarantine",
    "recover",
    "recover_goal",
    "recover_journal",
]
