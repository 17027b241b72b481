"""What `goal add --worktree` checks and records: a git repository, a base branch that exists."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pydantic import ValidationError

from loopx import git
from loopx.errors import WorktreeError
from loopx.registry.goalrecords import WorktreeSpec
from loopx.storage.files import describe_validation_error


def repository_top(workdir: Path) -> Path:
    """The top folder of the repository ``workdir`` is, checked to be that folder.

    Raises:
        WorktreeError: ``workdir`` is not in a git repository, or is a folder inside one.
    """
    top = git.toplevel(workdir) if workdir.is_dir() else None
    if top is None:
        raise WorktreeError(
            f"--worktree: {workdir} is not a git repository",
            hint=f"run `git init` there (and commit), or drop --worktree; checked with "
            f"`git -C {workdir} rev-parse --show-toplevel`",
        )
    if top != workdir.resolve():
        raise WorktreeError(
            f"--worktree: {workdir} is a folder inside the repository {top}",
            hint=f"pass the repository's top folder: --workdir {top}",
        )
    return top


def base_branch(repo: Path, base: str | None) -> str:
    """``base`` checked to be a local branch of ``repo``; else the branch checked out there.

    Raises:
        WorktreeError: no such branch, or ``repo`` has a detached HEAD and no ``base`` was given.
    """
    if base is None:
        current = git.current_branch(repo)
        if current is None:
            raise WorktreeError(
                f"--worktree: {repo} has no branch checked out (a detached HEAD)",
                hint="pass the branch to work from with --base BRANCH",
            )
        base = current
    if git.branch_commit(repo, base) is None:
        raise WorktreeError(
            f"--base {base}: no such branch in {repo} (or it has no commit yet)",
            hint=f"list the branches with `git -C {repo} branch`; a new repository needs a "
            "first commit",
        )
    return base


def worktree_spec(
    workdir: Path,
    *,
    base: str | None,
    include: Sequence[str] = (),
    folder: str | None = None,
) -> WorktreeSpec:
    """The worktree a new goal on ``workdir`` records, every part checked now.

    Raises:
        WorktreeError: not a repository's top folder, no such base branch, a bad pattern
            or folder.
    """
    repo = repository_top(workdir)
    chosen = base_branch(repo, base)
    where = None if folder is None else str(Path(folder).expanduser().resolve())
    try:
        return WorktreeSpec(base=chosen, include=list(include), folder=where)
    except ValidationError as e:
        raise WorktreeError(
            f"--worktree: {describe_validation_error(e)}",
            hint="patterns are globs relative to the repository, e.g. --worktree-include .env",
        ) from e
