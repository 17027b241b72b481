"""A worktree goal's state on the dashboard: its branch, its diff, its merge, and "merge waiting".

Asking git costs a few processes a goal, so :class:`WorktreeStates` keeps each
goal's state in memory and asks git again only when the goal's own files say
something changed: its status, its newest turn (a turn committed on the
branch), its merge journal or its worktree record; a state older than
``MAX_AGE_S`` is read again when a single goal's state is asked for (the base
may move outside LoopX), never for the overview's list. The overview asks at
most ``REFRESHES_PER_CALL`` goals' git a call, so a root of many finished
worktree goals costs the page no more than a few.

A done goal whose branch holds commits its base lacks, with no merge running,
is **merge waiting**: a person decides whether its work lands. A merge that
stopped part way (its process is gone) leaves the goal merge waiting too:
Merge finishes it. A goal whose merge is in progress is read again at every
ask, so its end (or its process's death) shows at once.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Final, Literal

from pydantic import Field

from loopx import git
from loopx.errors import LoopxError
from loopx.model import Record, UtcDatetime, utcnow
from loopx.process import ProcessIdentity
from loopx.registry.goalrecords import Goal, GoalStatus
from loopx.registry.worktree_record import record_file
from loopx.root import Layout
from loopx.status.view import GoalStatusView
from loopx.web.panels import WorktreePanel, worktree_panel
from loopx.worktree.mergejournal import MergeOutcome, journal_file, read_merge_journal

MAX_AGE_S: Final = 30.0  # a single goal's state is read again after this
REFRESHES_PER_CALL: Final = 8  # goals whose git the overview's list asks at most per call
MERGE_WAITING_SHOWN: Final = 25  # "merge waiting" cards the overview shows at most
COMMITS_SHOWN: Final = 5
FILES_SHOWN: Final = 20


class BranchCommit(Record):
    """One commit of the branch that its base lacks."""

    commit: str  # abbreviated
    subject: str
    at: UtcDatetime


class DiffSummary(Record):
    """What the branch changes against its base (``git diff base...branch``)."""

    files: int = 0
    insertions: int = 0
    deletions: int = 0
    paths: list[str] = Field(default_factory=list)  # the first FILES_SHOWN changed paths
    commits: list[BranchCommit] = Field(default_factory=list)  # the newest COMMITS_SHOWN


class WorktreeState(Record):
    """``/api/goals/<id>/worktree``: the goal's worktree, its diff, its merge, as last read."""

    schema_version: Literal[1] = 1
    goal_id: str
    goal_status: GoalStatus
    panel: WorktreePanel  # branch, base, folder, ahead/behind, dirty; the last merge
    diff: DiffSummary | None = None  # None while the branch holds nothing the base lacks
    diff_error: str | None = None
    merge_waiting: bool = False  # done, commits only on the branch, no merge running
    merge_interrupted: bool = False  # a merge stopped part way: its process is gone
    read_at: UtcDatetime  # when git was asked


class MergeWaiting(Record):
    """A "merge waiting" card on the overview."""

    goal_id: str
    objective: str
    branch: str
    base: str
    ahead: int
    behind: int
    dirty: bool
    interrupted: bool = False  # a merge stopped part way; Merge finishes it
    diff: DiffSummary | None = None


def _log(repo: Path, base: str, branch: str) -> list[BranchCommit]:
    text = git.output(
        repo, "log", f"-{COMMITS_SHOWN}", "--format=%h%x09%ct%x09%s", f"{base}..{branch}"
    )
    commits: list[BranchCommit] = []
    for line in text.splitlines():
        commit, at, subject = [*line.split("\t", 2), "", ""][:3]
        when = datetime.fromtimestamp(int(at) if at.isdigit() else 0, UTC)
        commits.append(BranchCommit(commit=commit, at=when, subject=subject))
    return commits


def branch_diff(repo: Path, base: str, branch: str) -> DiffSummary:
    """The files and lines ``branch`` changes since it left ``base``, and its newest commits.

    Raises:
        GitError: git refused (a branch is missing).
    """
    numstat = git.output(repo, "diff", "--numstat", f"refs/heads/{base}...refs/heads/{branch}")
    insertions = deletions = 0
    paths: list[str] = []
    for line in numstat.splitlines():
        added, removed, path = [*line.split("\t", 2), "", ""][:3]
        insertions += int(added) if added.isdigit() else 0  # "-": a binary file
        deletions += int(removed) if removed.isdigit() else 0
        paths.append(path)
    return DiffSummary(
        files=len(paths),
        insertions=insertions,
        deletions=deletions,
        paths=paths[:FILES_SHOWN],
        commits=_log(repo, f"refs/heads/{base}", f"refs/heads/{branch}"),
    )


def read_state(layout: Layout, goal: Goal) -> WorktreeState:
    """Ask git now for ``goal``'s worktree state (the goal has a worktree)."""
    panel = worktree_panel(layout, goal) or WorktreePanel()
    view = panel.view
    diff: DiffSummary | None = None
    diff_error: str | None = None
    if view is not None and view.ahead:
        try:
            diff = branch_diff(Path(view.repo), view.base, view.branch)
        except (LoopxError, OSError) as e:
            diff_error = str(e)
    pending = panel.merge is not None and panel.merge.outcome is MergeOutcome.PENDING
    interrupted = pending and not _merge_runs(layout, goal.id)
    return WorktreeState(
        goal_id=goal.id,
        goal_status=goal.status,
        panel=panel,
        diff=diff,
        diff_error=diff_error,
        merge_waiting=goal.status is GoalStatus.DONE
        and view is not None
        and view.ahead > 0
        and (interrupted or not pending),
        merge_interrupted=interrupted,
        read_at=utcnow(),
    )


def _merge_runs(layout: Layout, goal_id: str) -> bool:
    """Whether the process that last wrote the goal's unfinished merge journal still runs."""
    with contextlib.suppress(LoopxError, OSError):
        journal = read_merge_journal(layout, goal_id)
        if journal is not None and journal.owner_pid is not None and journal.owner_started:
            return ProcessIdentity(journal.owner_pid, journal.owner_started).alive()
        return journal is not None  # recorded before its owner: just planned, by a live merge
    return False


def _stamp(path: Path) -> tuple[int, int] | None:
    with contextlib.suppress(OSError):
        st = os.stat(path)
        return st.st_mtime_ns, st.st_size
    return None


def inputs_key(layout: Layout, goal: Goal, view: GoalStatusView | None) -> tuple[object, ...]:
    """What a goal's worktree state depends on among its files (two stats, no git)."""
    last = view.last_turn.turn_key if view is not None and view.last_turn is not None else None
    return (
        goal.status,
        goal.worktree,
        last,
        _stamp(journal_file(layout, goal.id)),
        _stamp(record_file(layout, goal.id)),
    )


class WorktreeStates:
    """Each worktree goal's state, read from git when its inputs change (thread-safe)."""

    def __init__(self, layout: Layout, clock: Callable[[], float] = time.monotonic) -> None:
        self.layout = layout
        self._clock = clock
        self._lock = threading.Lock()
        self._kept: dict[str, tuple[tuple[object, ...], float, WorktreeState]] = {}

    def state(self, goal: Goal, view: GoalStatusView | None) -> WorktreeState:
        """``goal``'s state: kept while its inputs hold and it is younger than MAX_AGE_S."""
        key = inputs_key(self.layout, goal, view)
        with self._lock:
            kept = self._kept.get(goal.id)
        if _holds(kept, key) and kept is not None and self._clock() - kept[1] < MAX_AGE_S:
            return kept[2]
        return self._read(goal, key)

    def forget(self, goal_id: str) -> None:
        """Read ``goal_id`` from git at its next ask (after a merge from the page)."""
        with self._lock:
            self._kept.pop(goal_id, None)

    def _read(self, goal: Goal, key: tuple[object, ...]) -> WorktreeState:
        state = read_state(self.layout, goal)
        with self._lock:
            self._kept[goal.id] = (key, self._clock(), state)
        return state

    def merge_waiting(
        self, candidates: Sequence[tuple[Goal, GoalStatusView | None]]
    ) -> tuple[list[MergeWaiting], int]:
        """The merge-waiting cards among ``candidates`` (done worktree goals), and their count.

        A goal whose inputs changed is read again, at most REFRESHES_PER_CALL a call;
        one not read yet counts once it is.
        """
        refreshed = 0
        found: list[MergeWaiting] = []
        for goal, view in candidates:
            key = inputs_key(self.layout, goal, view)
            with self._lock:
                kept = self._kept.get(goal.id)
            if kept is not None and _holds(kept, key):
                state = kept[2]
            elif refreshed < REFRESHES_PER_CALL:
                refreshed += 1
                state = self._read(goal, key)
            else:
                continue
            if state.merge_waiting and state.panel.view is not None:
                found.append(_card(goal, state))
        with self._lock:  # goals no longer done or gone are dropped
            ids = {goal.id for goal, _ in candidates}
            for goal_id in [
                g for g, k in self._kept.items() if g not in ids and k[2].merge_waiting
            ]:
                del self._kept[goal_id]
        return found[:MERGE_WAITING_SHOWN], len(found)


def _holds(kept: tuple[tuple[object, ...], float, WorktreeState] | None, key: object) -> bool:
    """Whether a kept state still holds: same inputs, and no merge in progress in it."""
    if kept is None or kept[0] != key:
        return False
    merge = kept[2].panel.merge
    return merge is None or merge.outcome is not MergeOutcome.PENDING


def _card(goal: Goal, state: WorktreeState) -> MergeWaiting:
    view = state.panel.view
    assert view is not None  # noqa: S101 - checked by the caller
    return MergeWaiting(
        goal_id=goal.id,
        objective=goal.objective,
        branch=view.branch,
        base=view.base,
        ahead=view.ahead,
        behind=view.behind,
        dirty=view.dirty,
        interrupted=state.merge_interrupted,
        diff=state.diff,
    )


def done_worktree_goals(
    goals: Sequence[GoalStatusView], policy: Callable[[str], Goal | None]
) -> list[tuple[Goal, GoalStatusView | None]]:
    """The done goals that own a worktree, in the queue's order (``policy``: a goal's entry)."""
    found: list[tuple[Goal, GoalStatusView | None]] = []
    for view in goals:
        if view.goal_status is not GoalStatus.DONE:
            continue
        goal = policy(view.goal_id)
        if goal is not None and goal.worktree is not None:
            found.append((goal, view))
    return found
