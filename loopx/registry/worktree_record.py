"""``goals/<id>/worktree.json``: a goal's worktree, recorded before git makes it.

Where a goal's worktree is and on which branch follows from the goal alone
(:func:`worktree_path`, :func:`branch_of`), so a half-made one is recognised
by its path and branch after a crash. The record says how far the making got:
``intended`` (written before ``git worktree add``: nothing of the goal's work
is there yet, so a claim may redo it) and ``ready`` (made, files copied: from
here on the worktree may hold work and LoopX never deletes it unasked).
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Final, Literal

from loopx.model import Record, UtcDatetime
from loopx.registry.goalrecords import Goal
from loopx.root import Layout
from loopx.storage.files import atomic_write_model, read_model_or_none

RECORD_NAME: Final = "worktree.json"
FOLDER_NAME: Final = "worktrees"  # under the root, unless the goal names its own folder
MERGE_FOLDER: Final = ".merge"  # in the root's worktrees folder: merges' scratch worktrees, locks
BRANCH_PREFIX: Final = "loopx/"


class WorktreePhase(StrEnum):
    """How far making a goal's worktree got."""

    INTENDED = "intended"  # recorded; `git worktree add` may or may not have run
    READY = "ready"  # made and the included files copied; turns run there


class WorktreeRecord(Record):
    """``goals/<id>/worktree.json``."""

    schema_version: Literal[1] = 1
    goal_id: str
    repo: str  # the repository's top folder (the goal's workdir)
    path: str  # the worktree's folder
    branch: str  # loopx/<id>
    base: str  # the branch it was made from
    base_commit: str  # the base's commit when it was made
    phase: WorktreePhase
    created_at: UtcDatetime
    updated_at: UtcDatetime


def record_file(layout: Layout, goal_id: str) -> Path:
    """``goals/<id>/worktree.json``."""
    return layout.goal_dir(goal_id) / RECORD_NAME


def read_record(layout: Layout, goal_id: str) -> WorktreeRecord | None:
    """The goal's worktree record, or None before its first claim.

    Raises:
        CorruptFileError: the record is damaged.
    """
    return read_model_or_none(record_file(layout, goal_id), WorktreeRecord)


def write_record(layout: Layout, record: WorktreeRecord) -> None:
    """Write the record durably (atomic rewrite)."""
    atomic_write_model(record_file(layout, record.goal_id), record)


def worktree_folder(layout: Layout, goal: Goal) -> Path:
    """The folder a goal's worktree is made in: its own, else ``<root>/worktrees``."""
    spec = goal.worktree
    return Path(spec.folder) if spec is not None and spec.folder else layout.root / FOLDER_NAME


def worktree_path(layout: Layout, goal: Goal) -> Path:
    """Where a goal's worktree is (or will be): ``<folder>/<id>``. Pure."""
    return worktree_folder(layout, goal) / goal.id


def branch_of(goal_id: str) -> str:
    """The branch a goal's worktree has checked out: ``loopx/<id>``. Pure."""
    return BRANCH_PREFIX + goal_id


def turn_workdir(layout: Layout, goal: Goal) -> Path:
    """Where the goal's turns run: its worktree for a ``--worktree`` goal, else its workdir. Pure."""
    return worktree_path(layout, goal) if goal.worktree is not None else Path(goal.workdir)
