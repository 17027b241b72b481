"""``loopx replay GOAL``: rebuild a goal's state, history, ledger and run logs from its journals.

The journals are the source of truth of a goal's past; ``state.json``,
``history.jsonl``, ``quota.jsonl`` and ``runs/`` are projections of them. This
module proves it: it folds the very pure functions a live turn's phases write
through (:mod:`loopx.turn.fold`) over every terminal journal, oldest turn
first, in memory, and compares the bytes they give with the files on disk.

What a journal does not hold: changes a human made through the CLI (gates
opened or answered, a reset host session). Each journal's plan carries a
snapshot of the goal state taken when the turn was planned, so those
human-owned fields are taken from that snapshot before the turn is replayed.
Human changes made after the last turn show up as differences of ``gates``,
``host_session`` or ``updated_at`` only. What ``doctor --repair`` does to a
future-dated state is recorded beside the journals (``clock-shifts.jsonl``)
and replayed after the turn it followed. The same snapshot lets replay check
the chain: the turn-owned fields the replay rebuilt before a turn must equal
the snapshot that turn was planned from (a ``chain`` difference otherwise,
e.g. when an earlier journal was lost or quarantined).

A goal that ``loopx gc`` compacted has a checkpoint (``checkpoint.json``):
replay starts from its state and ledger lines and applies only the journals
after it. Journals, run logs and lines of folded turns that a crashed gc left
behind are listed as ``folded``, not as differences (the next gc removes them).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Final, Literal

from pydantic import Field, JsonValue

from loopx.errors import GoalStateError, UnsafePathError
from loopx.ids import validate_goal_id
from loopx.log import get_logger
from loopx.model import Record, UtcDatetime, utcnow
from loopx.root import Layout
from loopx.storage.dirs import ensure_dir, fsync_dir
from loopx.storage.files import atomic_write_bytes, atomic_write_model, read_bytes
from loopx.turn.checkpoint import Checkpoint, read_checkpoint
from loopx.turn.clockshift import ClockShift, read_shifts
from loopx.turn.differences import Difference, compare_files, file_order, json_lines
from loopx.turn.fold import fold
from loopx.turn.inspection import RecoveryDecision, inspect_parsed
from loopx.turn.journal import TurnJournal, journal_files, parse_turn_key
from loopx.turn.lease import Lease, claim, fence_of, release

log = get_logger(__name__)

REPLAY_AGENT_ID: Final = "replay"


class ReplayReport(Record):
    """``loopx replay GOAL --json``."""

    schema_version: Literal[1] = 1
    goal_id: str
    journals: list[str]  # turn keys replayed, in turn order
    pending: list[str]  # in_progress journals (not replayed: `loopx recover` finishes them)
    invalid: list[str]  # journals that fail inspection (not replayed: recover quarantines them)
    state: dict[str, JsonValue]
    history: list[dict[str, JsonValue]]
    ledger: list[dict[str, JsonValue]]
    runs: list[str]  # run log file names the replay wrote (runs/<seq>.json, .md)
    verified: bool  # whether the files on disk were compared
    differences: list[Difference]
    checkpoint: str | None = None  # the turn key the goal's checkpoint folds through
    folded: list[str] = Field(default_factory=list)  # folded journals a gc has yet to remove
    repaired: list[str] = Field(default_factory=list)  # files rewritten by --repair
    set_aside: list[str] = Field(default_factory=list)  # where --repair moved the replaced files

    @property
    def clean(self) -> bool:
        """Whether the disk matches the replay (and nothing was left out of it)."""
        return not self.differences and not self.pending and not self.invalid


class SetAsideNote(Record):
    """``quarantine/<goal>/<file>.<time>.reason.json``: why ``--repair`` set a file aside."""

    schema_version: Literal[1] = 1
    goal_id: str
    original_path: str
    reason: str
    set_aside_at: UtcDatetime


# --- reading the journals ----------------------------------------------------------------------


@dataclass(slots=True)
class _Journals:
    terminal: list[TurnJournal] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)
    invalid: list[str] = field(default_factory=list)
    folded: list[str] = field(default_factory=list)  # covered by the checkpoint already


def _read_journals(layout: Layout, goal_id: str, *, through_seq: int = 0) -> _Journals:
    out = _Journals()
    for path in journal_files(layout, goal_id):
        turn_key = path.name.removesuffix(".json")
        parsed = parse_turn_key(turn_key)
        if parsed is not None and parsed[1] <= through_seq:
            out.folded.append(turn_key)
            continue
        try:
            raw = read_bytes(path)
        except FileNotFoundError:
            continue  # quarantined or archived while we listed
        except UnsafePathError:
            out.invalid.append(turn_key)
            continue
        view, journal = inspect_parsed(raw, goal_id=goal_id, turn_key=turn_key)
        if view.recovery_decision is RecoveryDecision.QUARANTINE:
            out.invalid.append(turn_key)
        elif view.recovery_decision is RecoveryDecision.NONE and journal is not None:
            out.terminal.append(journal)
        else:
            out.pending.append(turn_key)
    out.terminal.sort(key=lambda j: (j.seq, j.epoch))
    return out


# --- the rebuild -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Rebuilt:
    """The files the replay rebuilt, as bytes, keyed by their path relative to the goal directory."""

    files: dict[str, bytes]
    journals: _Journals
    chain: list[Difference]
    checkpoint: Checkpoint | None = None


def rebuild(layout: Layout, goal_id: str) -> Rebuilt:
    """Rebuild a goal's projections from its checkpoint and journals alone, in memory.

    Raises:
        InvalidGoalIdError: ``goal_id`` is not a safe id.
        GoalStateError: the goal has no directory under the root.
        CorruptFileError: the goal's checkpoint is damaged or fails its digest.

    """
    validate_goal_id(goal_id)
    if layout.goal_dir(goal_id).is_symlink():
        raise UnsafePathError(layout.goal_dir(goal_id), "it is a symlink")
    if not layout.goal_dir(goal_id).is_dir():
        raise GoalStateError(
            f"goal {goal_id!r} has no directory {layout.goal_dir(goal_id)}, so no journals",
            hint="check the id with `loopx goal list`; archived goals live under archived-goals/",
        )
    checkpoint = read_checkpoint(layout, goal_id)
    journals = _read_journals(
        layout, goal_id, through_seq=checkpoint.through_seq if checkpoint else 0
    )
    return rebuild_from(
        checkpoint,
        journals.terminal,
        goal_id=goal_id,
        journals=journals,
        shifts=read_shifts(layout, goal_id),
    )


def rebuild_from(
    checkpoint: Checkpoint | None,
    terminal: list[TurnJournal],
    *,
    goal_id: str,
    journals: _Journals | None = None,
    shifts: Sequence[ClockShift] = (),
) -> Rebuilt:
    """The files replaying ``terminal`` (oldest first) after ``checkpoint`` (and ``shifts``) gives. Pure."""
    journals = journals or _Journals(terminal=terminal)
    folded = fold(checkpoint, journals.terminal, goal_id=goal_id, shifts=shifts)
    return Rebuilt(
        files=folded.files(), journals=journals, chain=folded.chain, checkpoint=checkpoint
    )


# --- the command -------------------------------------------------------------------------------


def compare(layout: Layout, goal_id: str, rebuilt: Rebuilt) -> list[Difference]:
    """The replay's chain differences, then every difference of the files on disk."""
    through = rebuilt.checkpoint.through_seq if rebuilt.checkpoint else 0
    return [*rebuilt.chain, *compare_files(layout, goal_id, rebuilt.files, folded_through=through)]


def _documents(rebuilt: Rebuilt) -> tuple[dict[str, Any], list[Any], list[Any]]:
    state = json.loads(rebuilt.files["state.json"])
    history = json_lines(rebuilt.files.get("history.jsonl", b""))
    ledger = json_lines(rebuilt.files.get("quota.jsonl", b""))
    return state, history, ledger


def replay(layout: Layout, goal_id: str, *, verify: bool = False) -> ReplayReport:
    """Rebuild a goal from its journals; with ``verify``, compare with the files on disk.

    Raises:
        InvalidGoalIdError: ``goal_id`` is not a safe id.
        GoalStateError: the goal has no directory under the root.

    """
    rebuilt = rebuild(layout, goal_id)
    state, history, ledger = _documents(rebuilt)
    return ReplayReport(
        goal_id=goal_id,
        journals=[j.turn_key for j in rebuilt.journals.terminal],
        pending=rebuilt.journals.pending,
        invalid=rebuilt.journals.invalid,
        state=state,
        history=history,
        ledger=ledger,
        runs=[n.removeprefix("runs/") for n in rebuilt.files if n.startswith("runs/")],
        verified=verify,
        differences=compare(layout, goal_id, rebuilt) if verify else [],
        checkpoint=rebuilt.checkpoint.through_turn_key if rebuilt.checkpoint else None,
        folded=rebuilt.journals.folded,
    )


def repair(layout: Layout, goal_id: str, *, now: datetime | None = None) -> ReplayReport:
    """Rewrite every projection file that differs from the replay, setting the old one aside.

    Runs under the goal's lease (so no turn writes meanwhile) and refuses while
    a journal is unfinished or invalid (``loopx recover`` first). A replaced
    file is moved to ``quarantine/<goal>/<name>.<UTC time>`` first, never
    deleted; the quota aggregate cache is dropped so it is rebuilt.

    Raises:
        GoalStateError: the goal is leased by a live agent, or has unfinished journals.

    """
    now = now or utcnow()
    rebuilt = rebuild(layout, goal_id)
    if rebuilt.journals.pending or rebuilt.journals.invalid:
        raise GoalStateError(
            f"goal {goal_id}: journals {rebuilt.journals.pending + rebuilt.journals.invalid} are "
            "unfinished or invalid, so the replay would be incomplete",
            hint="run `loopx recover` first, then `loopx replay GOAL --repair` again",
        )
    lease = _claim_alone(layout, goal_id, now=now)
    try:
        repaired, set_aside = _rewrite(layout, goal_id, rebuilt, lease, now=now)
    finally:
        release(layout, lease)
    log.info("goal_repaired_from_journals", goal_id=goal_id, files=repaired)
    state, history, ledger = _documents(rebuilt)
    return ReplayReport(
        goal_id=goal_id,
        journals=[j.turn_key for j in rebuilt.journals.terminal],
        pending=[],
        invalid=[],
        state=state,
        history=history,
        ledger=ledger,
        runs=[n.removeprefix("runs/") for n in rebuilt.files if n.startswith("runs/")],
        verified=True,
        differences=compare(layout, goal_id, rebuilt),
        checkpoint=rebuilt.checkpoint.through_turn_key if rebuilt.checkpoint else None,
        folded=rebuilt.journals.folded,
        repaired=repaired,
        set_aside=set_aside,
    )


def _claim_alone(layout: Layout, goal_id: str, *, now: datetime) -> Lease:
    """The goal's lease for the repair, so no turn writes meanwhile.

    Raises:
        GoalStateError: another agent holds it.

    """
    claimed = claim(layout, goal_id, agent_id=REPLAY_AGENT_ID, now=now)
    if claimed.lease is None:
        holder = claimed.blocking.agent_id if claimed.blocking else "?"
        raise GoalStateError(
            f"goal {goal_id} is leased by {holder}; a repair needs the goal to itself",
            hint="pause the goal (`loopx goal pause`) or stop the supervisor, then retry",
        )
    return claimed.lease


def _rewrite(
    layout: Layout, goal_id: str, rebuilt: Rebuilt, lease: Lease, *, now: datetime
) -> tuple[list[str], list[str]]:
    """Rewrite each projection file that differs from the replay, under the lease's fence.

    Returns:
        The files rewritten, and where the files they replaced were set aside.

    """
    repaired: list[str] = []
    set_aside: list[str] = []
    differences = compare(layout, goal_id, rebuilt)
    names = sorted({d.file for d in differences if not d.file.startswith("turns/")}, key=file_order)
    goal_dir = layout.goal_dir(goal_id)
    with fence_of(layout, lease).held():
        for name in names:
            target = goal_dir / name
            if target.exists() and not target.is_symlink():
                set_aside.append(_set_aside(layout, goal_id, target, name, now=now))
            data = rebuilt.files.get(name)
            if data is not None:
                ensure_dir(target.parent)
                atomic_write_bytes(target, data)
                repaired.append(name)
        layout.quota_aggregate_file(goal_id).unlink(missing_ok=True)
    return repaired, set_aside


def _set_aside(layout: Layout, goal_id: str, target: Path, name: str, *, now: datetime) -> str:
    """Move ``target`` to ``quarantine/<goal>/<name>.<UTC time>`` with a note saying why."""
    aside_dir = ensure_dir(ensure_dir(layout.quarantine_dir) / goal_id)
    aside = aside_dir / f"{name.replace('/', '_')}.{now.strftime('%Y%m%dT%H%M%SZ')}"
    note = SetAsideNote(
        goal_id=goal_id,
        original_path=str(target),
        set_aside_at=now,
        reason="replaced by `loopx replay --repair` with the file rebuilt from "
        "the goal's journals; delete once you no longer need it",
    )
    atomic_write_model(aside.with_name(aside.name + ".reason.json"), note)
    os.replace(target, aside)
    fsync_dir(aside_dir)
    return str(aside)


__all__ = [
    "Rebuilt",
    "ReplayReport",
    "compare",
    "rebuild",
    "rebuild_from",
    "repair",
    "replay",
]
