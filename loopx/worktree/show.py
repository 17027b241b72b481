"""`loopx goal worktree ID [--remove]`: a goal's worktree as it is, and removing it safely.

Removing refuses (exit 2, nothing changed) while the worktree holds work that
exists nowhere else: uncommitted changes (files matching the goal's
``--worktree-include`` patterns are copies from the repository, not work) or
commits its base branch does not contain. Nothing else in LoopX removes a
worktree: `goal done`, `archive` and a merge leave it where it is.
"""

from __future__ import annotations

import fnmatch
from pathlib import Path
from typing import Literal

from pydantic import Field

from loopx import git
from loopx.errors import WorktreeError
from loopx.model import Record
from loopx.registry.goalrecords import Goal
from loopx.registry.worktree_record import (
    WorktreePhase,
    branch_of,
    read_record,
    record_file,
    worktree_path,
)
from loopx.root import Layout
from loopx.turn.lease import read_lease

_LISTED: int = 50  # uncommitted paths a view names at most


class WorktreeView(Record):
    """`loopx goal worktree --json`: where the goal's worktree is and what it holds."""

    schema_version: Literal[1] = 1
    goal_id: str
    repo: str
    path: str
    branch: str
    base: str
    phase: WorktreePhase | None  # None: not made yet (the goal never ran)
    exists: bool  # the folder is there and git knows it as a worktree
    ahead: int = 0  # commits on the branch that the base lacks
    behind: int = 0  # commits on the base that the branch lacks
    dirty: bool = False  # uncommitted changes (included copies aside)
    changes: list[str] = Field(default_factory=list)  # the first 50 uncommitted paths
    removed: bool = False  # `--remove` removed it (and its merged branch)


def _work_changes(path: Path, include: list[str]) -> list[str]:
    return [
        p for p in git.changes(path) if not any(fnmatch.fnmatch(p, pattern) for pattern in include)
    ]


def worktree_view(layout: Layout, goal: Goal) -> WorktreeView:
    """The goal's worktree now.

    Raises:
        WorktreeError: the goal has no worktree.
    """
    spec = goal.worktree
    if spec is None:
        raise WorktreeError(
            f"goal {goal.id!r} has no worktree: its turns run in {goal.workdir}",
            hint=f"give it one with `loopx goal add {goal.id} --update --worktree`",
        )
    record = read_record(layout, goal.id)
    path = Path(record.path) if record else worktree_path(layout, goal)
    repo = Path(goal.workdir)
    view = WorktreeView(
        goal_id=goal.id,
        repo=str(repo),
        path=str(path),
        branch=branch_of(goal.id),
        base=spec.base,
        phase=record.phase if record else None,
        exists=False,
    )
    if not repo.is_dir() or git.toplevel(repo) is None:
        return view
    exists = path.is_dir() and git.entry_at(repo, path) is not None
    counts = (0, 0)
    if git.branch_commit(repo, view.branch) and git.branch_commit(repo, spec.base):
        counts = git.ahead_behind(repo, f"refs/heads/{spec.base}", f"refs/heads/{view.branch}")
    changed = _work_changes(path, spec.include) if exists else []
    return view.model_copy(
        update={
            "exists": exists,
            "ahead": counts[0],
            "behind": counts[1],
            "dirty": bool(changed),
            "changes": changed[:_LISTED],
        }
    )


def remove_worktree(layout: Layout, goal: Goal) -> WorktreeView:
    """Remove the goal's worktree and its branch, when they hold nothing the base lacks.

    Raises:
        WorktreeError: the goal has no worktree, a turn holds it, or it holds uncommitted
            changes or commits not in its base (then nothing is changed).
    """
    view = worktree_view(layout, goal)
    refusal = _refusal(layout, goal, view)
    if refusal is not None:
        raise WorktreeError(
            f"goal {goal.id!r}: not removing worktree {view.path}: {refusal}", hint=_hint(view)
        )
    repo = Path(view.repo)
    if view.exists:
        # --force: git counts the included copies as untracked work; _refusal checked the rest.
        git.run(repo, "worktree", "remove", "--force", view.path)
    if git.toplevel(repo) is not None:
        git.run(repo, "worktree", "prune")
        if git.branch_commit(repo, view.branch) is not None:
            git.run(repo, "branch", "-D", view.branch)  # its commits are all in the base
    record_file(layout, goal.id).unlink(missing_ok=True)
    return view.model_copy(update={"exists": False, "removed": True})


def _refusal(layout: Layout, goal: Goal, view: WorktreeView) -> str | None:
    if read_lease(layout, goal.id) is not None:
        return "a turn holds the goal now"
    if view.dirty:
        shown = ", ".join(view.changes[:5])
        return f"it has uncommitted changes ({shown})"
    if view.ahead:
        return f"branch {view.branch} has {view.ahead} commit(s) not in {view.base}"
    return None


def _hint(view: WorktreeView) -> str:
    if view.dirty:
        return f"commit or discard them in {view.path} (`git -C {view.path} status`)"
    if view.ahead:
        return f"merge it first (`loopx goal merge {view.goal_id}`), or delete the branch yourself"
    return "wait for the turn to end, or pause the goal first"
