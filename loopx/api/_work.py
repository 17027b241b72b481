"""Worktrees in the API: `goal add --worktree`'s options, `loopx goal worktree` and `goal merge`."""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from loopx.errors import UsageError, WorktreeError
from loopx.model import utcnow
from loopx.registry.bulk import GoalImportError
from loopx.registry.goalrecords import Goal, WorktreeSpec
from loopx.registry.goals import get_goal
from loopx.registry.store import read_goal
from loopx.registry.worktree_spec import worktree_spec
from loopx.root import Layout

# Imported where used: `goal add` needs neither (a tenth of its start, with loopx.api._goals's).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from loopx.worktree.mergejournal import MergeJournal, MergeMode
    from loopx.worktree.show import WorktreeView


@dataclass(frozen=True, slots=True)
class WorktreeOptions:
    """`goal add --worktree [--base B] [--worktree-include P ...] [--worktree-dir D]`."""

    worktree: bool = False
    base: str | None = None
    include: tuple[str, ...] = ()
    folder: str | os.PathLike[str] | None = None


def worktree_of(
    layout: Layout,
    goal_id: str,
    where: Path | None,
    options: WorktreeOptions,
    *,
    update: bool,
    default_workdir: Path | None,
) -> WorktreeSpec | None:
    """The worktree a `goal add` records, checked now (None: none given, keep the goal's).

    Raises:
        UsageError: ``--base``, ``--worktree-include`` or ``--worktree-dir`` without
            ``--worktree``.
        WorktreeError: the workdir is not a repository's top folder, or no such base.
    """
    if not options.worktree:
        if options.base is not None or options.include or options.folder is not None:
            raise UsageError(
                "--base, --worktree-include and --worktree-dir go with --worktree",
                hint="add --worktree to give the goal a git worktree of its own",
            )
        return None
    existing = read_goal(layout, goal_id) if update else None
    workdir = where or (Path(existing.workdir) if existing else None)
    workdir = workdir or (default_workdir or Path.cwd()).resolve()
    folder = None if options.folder is None else str(options.folder)
    return worktree_spec(workdir, base=options.base, include=options.include, folder=folder)


def check_worktrees(source: Path, goals: list[tuple[int | None, Goal]]) -> None:
    """`goal add --worktree`'s checks for every worktree goal of an import, once per repository.

    Raises:
        GoalImportError: the first line whose repository or base branch is at fault.
    """
    verdicts: dict[tuple[str, str], WorktreeError | None] = {}
    for number, goal in goals:
        if goal.worktree is None:
            continue
        key = (goal.workdir, goal.worktree.base)
        if key not in verdicts:
            try:
                worktree_spec(Path(goal.workdir), base=goal.worktree.base)
                verdicts[key] = None
            except WorktreeError as e:
                verdicts[key] = e
        error = verdicts[key]
        if error is not None:
            raise GoalImportError(source, number, error.message, hint=error.hint)


def show_worktree(layout: Layout, goal_id: str, *, remove: bool = False) -> WorktreeView:
    """`loopx goal worktree ID [--remove]`.

    Raises:
        GoalNotFoundError: no such goal.
        WorktreeError: no worktree, or `--remove` of one that holds work (nothing removed).
    """
    from loopx.worktree.show import remove_worktree, worktree_view  # noqa: PLC0415

    goal = get_goal(layout, goal_id)
    return remove_worktree(layout, goal) if remove else worktree_view(layout, goal)


def merge_worktree(
    layout: Layout, goal_id: str, *, mode: MergeMode | None, now: datetime | None = None
) -> MergeJournal:
    """`loopx goal merge ID [--mode M]` (see :func:`loopx.agents.automerge.merge`)."""
    from loopx.agents.automerge import merge  # noqa: PLC0415 - the agents' side is heavy

    return merge(layout, goal_id, mode=mode, now=now or utcnow())


def abort_merge_worktree(layout: Layout, goal_id: str) -> MergeJournal:
    """`loopx goal merge ID --abort` (see :func:`loopx.worktree.merge.abort_merge`)."""
    from loopx.worktree.merge import abort_merge  # noqa: PLC0415 - only this command needs it

    return abort_merge(layout, goal_id)
