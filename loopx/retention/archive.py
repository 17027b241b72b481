"""Archiving a goal: move ``goals/<id>`` aside and mark it archived in its goal file.

The move is one ``rename`` on the same filesystem, made while holding the
goal's claim lock (``goals/<id>/epoch.lock``), so no agent can claim the goal
between the lease check and the move. The registry is marked first: a crash
between the two leaves an archived registry entry whose files are still in
``goals/``, and running ``loopx archive`` again finishes the move.
"""

from __future__ import annotations

import os
import shutil
import socket
from datetime import datetime
from pathlib import Path
from typing import Final, Literal

from loopx.errors import GoalNotFoundError, GoalStateError, LoopxError, UsageError
from loopx.history.reader import history_tail
from loopx.ids import validate_goal_id
from loopx.model import Record, UtcDatetime, iso_utc
from loopx.registry.goalrecords import Goal, GoalStatus
from loopx.registry.store import read_goal, update_goal
from loopx.root import Layout
from loopx.root.hints import note_goal_changed
from loopx.state import GoalState
from loopx.storage.dirs import ensure_dir, fsync_dir
from loopx.storage.files import atomic_write_model, read_model_or_none
from loopx.storage.locks import locked
from loopx.turn.historyline import HistoryLine
from loopx.turn.lease import Holder, Lease, holder_state

STAMP: Final = "%Y%m%dT%H%M%SZ"
_MAX_COLLISIONS: Final = 1000


class CrossDeviceArchiveError(LoopxError):
    """The archive directory is on another filesystem, so a rename cannot move the goal."""

    def __init__(self, source: Path, destination: Path) -> None:
        super().__init__(
            f"cannot move {source} to {destination} by a rename: they are on different filesystems",
            hint="pass --copy to copy the files and then delete the originals, "
            "or choose an --archive-root on the same filesystem",
        )
        self.source, self.destination = source, destination


class LiveLeaseError(GoalStateError):
    """An agent holds the goal's lease: archiving now would pull files from under a turn."""

    def __init__(self, goal_id: str, lease: Lease) -> None:
        super().__init__(
            f"goal {goal_id!r} is leased by agent {lease.agent_id} (pid {lease.pid} on "
            f"{lease.hostname}, epoch {lease.epoch}, expires {iso_utc(lease.expires_at)})",
            hint=f"pause it with `loopx goal pause {goal_id}`, wait for the turn to end, then retry",
        )
        self.goal_id, self.lease = goal_id, lease


class ArchiveResult(Record):
    """``loopx archive --json``."""

    schema_version: Literal[1] = 1
    goal_id: str
    source: str
    destination: str
    dry_run: bool
    copied: bool = False  # moved by copy + delete instead of a rename
    registered: bool
    previous_status: GoalStatus | None
    archived_at: UtcDatetime
    turns_applied: int = 0
    open_gates: int = 0
    last_turn: str | None = None
    summary_markdown: str


def lease_is_live(lease: Lease, *, now: datetime, hostname: str) -> bool:
    """Whether a lease still protects a turn: unexpired, or its holder runs here."""
    if lease.expires_at > now:
        return True
    return holder_state(lease, hostname=hostname) is Holder.ALIVE


def destination_for(base: Path, goal_id: str, now: datetime) -> Path:
    """``<base>/<id>-<UTC stamp>``, with ``_1``, ``_2``... when that name is taken."""
    stem = f"{goal_id}-{now.strftime(STAMP)}"
    candidate = base / stem
    for n in range(1, _MAX_COLLISIONS):
        if not candidate.exists() and not candidate.is_symlink():
            return candidate
        candidate = base / f"{stem}_{n}"
    raise GoalStateError(
        f"{base} already has {_MAX_COLLISIONS} archives named {stem}*",
        hint="clean up the archive directory",
    )


def _summary(result: dict[str, object], state: GoalState | None, tail: list[HistoryLine]) -> str:
    verb = "Would archive" if result["dry_run"] else "Archived"
    lines = [
        f"# {verb} goal `{result['goal_id']}`",
        "",
        f"- from: `{result['source']}`",
        f"- to: `{result['destination']}`" + (" (copied)" if result["copied"] else ""),
    ]
    if result["registered"]:
        lines.append(f"- registry: marked `archived` (was `{result['previous_status']}`)")
    else:
        lines.append("- registry: not registered")
    if state is not None:
        lines.append(f"- turns applied: {state.turn_seq}; open gates: {len(state.open_gates)}")
        if state.next_action:
            lines.append(f"- next action was: {state.next_action}")
    if tail:
        last = tail[-1]
        lines.append(
            f"- last turn: #{last.seq} {last.kind or last.status} at "
            f"{iso_utc(last.ended_at, 'seconds')}: {last.summary}"
        )
    return "\n".join(lines) + "\n"


def _move(source: Path, destination: Path, *, copy: bool) -> bool:
    """Rename (or, across filesystems with ``copy``, copy then delete). Returns whether it copied."""
    ensure_dir(destination.parent)
    if os.stat(source).st_dev == os.stat(destination.parent).st_dev:
        os.rename(source, destination)
        fsync_dir(source.parent)
        fsync_dir(destination.parent)
        return False
    if not copy:
        raise CrossDeviceArchiveError(source, destination)
    partial = destination.with_name(f".{destination.name}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    shutil.copytree(source, partial, symlinks=True)
    os.rename(partial, destination)
    fsync_dir(destination.parent)
    shutil.rmtree(source)
    fsync_dir(source.parent)
    return True


def archive_goal(
    layout: Layout,
    goal_id: str,
    *,
    now: datetime,
    archive_root: Path | None = None,
    allow_registered: bool = False,
    dry_run: bool = False,
    copy: bool = False,
) -> ArchiveResult:
    """Move a goal's files to the archive and mark it archived in the registry.

    Raises:
        InvalidGoalIdError: the id is not a safe path segment.
        GoalNotFoundError: neither the registry nor ``goals/`` knows the goal.
        GoalStateError: the goal is active and ``allow_registered`` is False.
        LiveLeaseError: an agent holds the goal's lease.
        CrossDeviceArchiveError: the archive is on another filesystem and ``copy`` is False.

    """
    validate_goal_id(goal_id)
    source = layout.goal_dir(goal_id)
    base = archive_root.expanduser().resolve() if archive_root is not None else layout.archive_dir
    goal = read_goal(layout, goal_id)
    if not _has_goal_files(layout, goal_id):
        if goal is None:
            raise GoalNotFoundError(goal_id, layout.registry)
        raise GoalStateError(
            f"goal {goal_id!r} has no files in {layout.goals_dir} (status {goal.status})",
            hint="it may be archived already; look in " + str(base),
        )
    if goal is not None and goal.status is GoalStatus.ACTIVE and not allow_registered:
        raise GoalStateError(
            f"goal {goal_id!r} is registered and active; archiving it would stop its work",
            hint=f"pause or finish it first (`loopx goal pause {goal_id}`), or pass --allow-registered",
        )
    with locked(layout.epoch_file(goal_id)):
        lease = read_model_or_none(layout.lease_file(goal_id), Lease)
        if lease is not None and lease_is_live(lease, now=now, hostname=socket.gethostname()):
            raise LiveLeaseError(goal_id, lease)
        state = read_model_or_none(layout.state_file(goal_id), GoalState)
        tail = history_tail(layout.history_file(goal_id), 1)
        destination = destination_for(base, goal_id, now)
        if not dry_run and not copy:
            ensure_dir(base)
            if os.stat(source).st_dev != os.stat(base).st_dev:
                raise CrossDeviceArchiveError(source, destination)
        copied = False
        archived: Goal | None = None
        if not dry_run:
            if goal is not None:
                archived = _mark_archived(layout, goal, now)
            copied = _move(source, destination, copy=copy)
    if archived is not None:
        # The policy stays registered (status archived), so the id is not reused by mistake.
        ensure_dir(source)
        atomic_write_model(layout.goal_file(goal_id), archived)
    note_goal_changed(layout, goal_id)
    fields: dict[str, object] = {
        "goal_id": goal_id,
        "source": str(source),
        "destination": str(destination),
        "dry_run": dry_run,
        "copied": copied,
        "registered": goal is not None,
        "previous_status": goal.status if goal is not None else None,
    }
    return ArchiveResult(
        **fields,
        archived_at=now,
        turns_applied=state.turn_seq if state else 0,
        open_gates=len(state.open_gates) if state else 0,
        last_turn=tail[-1].turn_key if tail else None,
        summary_markdown=_summary(fields, state, tail),
    )


def _has_goal_files(layout: Layout, goal_id: str) -> bool:
    """Whether ``goals/<id>/`` holds more than the policy of an archived goal."""
    try:
        names = os.listdir(layout.goal_dir(goal_id))
    except (FileNotFoundError, NotADirectoryError):
        return False
    return any(n not in ("goal.json", "goal.json.lock") for n in names)


def _mark_archived(layout: Layout, goal: Goal, now: datetime) -> Goal:
    def change(current: Goal | None) -> Goal:
        base = current or goal
        return base.model_copy(update={"status": GoalStatus.ARCHIVED, "updated_at": now})

    return update_goal(layout, goal.id, change)


def parse_archive_root(value: str | None) -> Path | None:
    """``--archive-root DIR`` as a path (None when not given).

    Raises:
        UsageError: the value is empty.

    """
    if value is None:
        return None
    if not value.strip():
        raise UsageError("--archive-root is empty", hint="name a directory")
    return Path(value)
