"""``goals/<id>/merge.json``: the journal of a goal's merge, one step recorded at a time.

The steps are in :class:`MergeStep`'s order; :mod:`loopx.worktree.merge`
runs each and records it before the next, so a rerun (or `loopx recover`)
continues from the last recorded step. The base branch moves in one
compare-and-swap (``git update-ref`` with the old commit as the expected
one), so after a kill it is at its old commit or at the merged one, never
between.

Every git command that changes something (the scratch worktree's add and
remove, reset, merge, commit, the ref update, the checkout's sync) is a
:class:`GitRun` in ``runs``, recorded before it starts, again with its pid and
start time once it runs, and with its exit once it ends; ``marks`` dates each
step as it completed. A run with no exit recorded was interrupted: recovery
(:mod:`loopx.worktree.mergeleftovers`) knows what it leaves behind.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated, Final, Literal

from pydantic import Field

from loopx.model import Record, UtcDatetime
from loopx.root import Layout
from loopx.storage.files import atomic_write_model, read_model_or_none

JOURNAL_NAME: Final = "merge.json"
CHECK_TAIL_CHARS: Final = 3000  # of the check's output kept (and shown in the gate)


class MergeMode(StrEnum):
    """How the goal's branch is merged into its base."""

    FF = "ff"  # fast-forward only: the base must not have moved since the branch left it
    MERGE = "merge"  # a merge commit (always, even when a fast-forward would do)
    SQUASH = "squash"  # one new commit on the base with the branch's changes


class MergeStep(StrEnum):
    """The last step of a merge that completed, in order."""

    PLANNED = "planned"  # the commits to merge recorded; nothing made yet
    MERGED = "merged"  # merged in the scratch worktree (or found conflicting)
    CHECKED = "checked"  # the done-check ran on the merged tree, its result recorded
    MOVED = "moved"  # the base branch points at the merged commit
    SYNCED = "synced"  # the checkout of the base (if any) shows the merged tree
    FINISHED = "finished"  # scratch removed, gate opened if one was due: terminal
    ABORTED = "aborted"  # cancelled (`goal merge --abort`, or recovery): undone, terminal


class MergeOutcome(StrEnum):
    """How the merge ended (``pending`` until it has)."""

    PENDING = "pending"
    MERGED = "merged"  # the base moved to the merged commit
    UP_TO_DATE = "up_to_date"  # the base already holds every commit of the branch
    CONFLICT = "conflict"  # the base is untouched; a gate names the files
    CHECK_FAILED = "check_failed"  # the base is untouched; a gate holds the check's output
    BASE_MOVED = "base_moved"  # the base moved meanwhile; untouched by this merge
    ALREADY_MERGED = "already_merged"  # a squash found every change already on the base
    ABORTED = "aborted"  # cancelled before it ended; the base is as it was before it


class MergeCheck(Record):
    """The done-check's result on the merged tree."""

    exit_code: int | None  # None: it was killed at its timeout
    passed: bool
    output_tail: Annotated[str, Field(max_length=CHECK_TAIL_CHARS)] = ""


class GitRun(Record):
    """One git command of a merge: recorded before it starts, then its process, then its end."""

    action: str  # what it does in the merge: scratch_add, merge, commit, move, sync, ...
    argv: list[str]  # git's arguments (after ``git -C where``)
    where: str  # the folder it runs in
    owner_pid: int  # the `loopx goal merge` process that runs it
    owner_started: float  # its psutil create_time()
    pid: int | None = None  # git's pid (None: recorded before it started)
    started: float | None = None  # git's psutil create_time()
    started_at: UtcDatetime
    ended_at: UtcDatetime | None = None
    exit_code: int | None = None  # None while running, or when it was interrupted

    @property
    def ended(self) -> bool:
        """Whether its end was recorded."""
        return self.ended_at is not None


class MergeMark(Record):
    """When a step of the merge completed."""

    step: MergeStep
    at: UtcDatetime


class MergeJournal(Record):
    """``goals/<id>/merge.json``."""

    schema_version: Literal[1] = 1
    goal_id: str
    repo: str  # the repository's top folder
    base: str
    branch: str
    mode: MergeMode
    base_old: str  # the base's commit when the merge was planned (update-ref's expected value)
    branch_head: str  # the branch's commit being merged
    scratch: str  # the scratch worktree the merge is made in
    checkout: str | None = None  # the worktree with the base checked out, synced after the move
    step: MergeStep = MergeStep.PLANNED
    outcome: MergeOutcome = MergeOutcome.PENDING
    merged_commit: str | None = None
    conflicts: list[str] = Field(default_factory=list)
    check: MergeCheck | None = None
    gate_id: int | None = None
    owner_pid: int | None = None  # the `loopx goal merge` process that last wrote this
    owner_started: float | None = None  # its psutil create_time()
    runs: list[GitRun] = Field(default_factory=list)  # its git commands, in order
    marks: list[MergeMark] = Field(default_factory=list)  # each completed step, dated
    undone: list[str] = Field(default_factory=list)  # what an abort undid, in words
    created_at: UtcDatetime  # also the merge commit's date, so a redone merge makes the same one
    updated_at: UtcDatetime

    @property
    def finished(self) -> bool:
        """Whether the merge reached its last step (finished or aborted)."""
        return self.step in (MergeStep.FINISHED, MergeStep.ABORTED)

    @property
    def interrupted(self) -> GitRun | None:
        """The git run that was recorded but never ended (its process was killed), or None."""
        last = self.runs[-1] if self.runs else None
        return last if last is not None and not last.ended else None


def journal_file(layout: Layout, goal_id: str) -> Path:
    """``goals/<id>/merge.json``."""
    return layout.goal_dir(goal_id) / JOURNAL_NAME


def read_merge_journal(layout: Layout, goal_id: str) -> MergeJournal | None:
    """The goal's last merge journal, or None.

    Raises:
        CorruptFileError: the journal is damaged.
    """
    return read_model_or_none(journal_file(layout, goal_id), MergeJournal)


def write_merge_journal(layout: Layout, journal: MergeJournal) -> None:
    """Record ``journal`` durably (atomic rewrite)."""
    atomic_write_model(journal_file(layout, journal.goal_id), journal)
