"""The `git` CLI, one small function per question or change LoopX needs of a repository.

Every call runs ``git -C DIR ...`` with a fixed environment (no pager, no
prompt, the C locale so messages parse the same everywhere) and raises
:class:`loopx.errors.GitError` with git's last stderr line when it fails. Who
holds a repository, the proof a killed git's lock may go, is :mod:`loopx.git.holders`.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from loopx.errors import GitError, WorktreeError

GIT: Final = "git"
_TIMEOUT_S: Final = 300.0


def _env(extra: Mapping[str, str] | None) -> dict[str, str]:
    env = dict(os.environ)
    for name in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_COMMON_DIR"):
        env.pop(name, None)  # a host's or a hook's repository must not leak into ours
    # GIT_OPTIONAL_LOCKS=0: a `git status` killed mid-way must leave no index.lock behind.
    env.update(
        {"LC_ALL": "C", "GIT_TERMINAL_PROMPT": "0", "GIT_PAGER": "cat", "GIT_OPTIONAL_LOCKS": "0"}
    )
    env.update(extra or {})
    return env


def run(
    where: Path,
    *args: str,
    check: bool = True,
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """``git -C where args...``; its output as text.

    A git killed by a signal raises even without ``check``: its exit code answers no
    question (a killed ``rev-parse --verify`` would read as "no such branch").

    Raises:
        GitError: git exited non-zero and ``check`` is set, or a signal killed it.
        WorktreeError: git is not installed.
    """
    argv = [GIT, "-C", str(where), *args]
    try:
        done = subprocess.run(  # a fixed program, never a shell
            argv,
            capture_output=True,
            text=True,
            env=_env(env),
            timeout=_TIMEOUT_S,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except FileNotFoundError as e:
        raise WorktreeError(
            "git is not installed (not found on PATH)", hint="install git to use --worktree"
        ) from e
    if done.returncode < 0 or (check and done.returncode != 0):
        stderr = done.stderr if done.returncode > 0 else f"killed by signal {-done.returncode}"
        raise GitError([GIT, *args], where, done.returncode, stderr)
    return done


def start(where: Path, *args: str, env: Mapping[str, str] | None = None) -> subprocess.Popen[str]:
    """Start ``git -C where args...`` (output piped as text) for a caller that records its pid.

    Raises:
        WorktreeError: git is not installed.
    """
    argv = [GIT, "-C", str(where), *args]
    try:
        return subprocess.Popen(  # a fixed program, never a shell
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            env=_env(env),
        )
    except FileNotFoundError as e:
        raise WorktreeError(
            "git is not installed (not found on PATH)", hint="install git to use --worktree"
        ) from e


def output(where: Path, *args: str) -> str:
    """The stripped stdout of a git command that must succeed."""
    return run(where, *args).stdout.strip()


def toplevel(where: Path) -> Path | None:
    """The top of the work tree holding ``where``, or None when it is not in a git repository."""
    done = run(where, "rev-parse", "--show-toplevel", check=False)
    return Path(done.stdout.strip()).resolve() if done.returncode == 0 else None


def common_dir(where: Path) -> Path:
    """The repository's common git directory (the same for every worktree of it)."""
    return (where / output(where, "rev-parse", "--git-common-dir")).resolve()


def current_branch(where: Path) -> str | None:
    """The branch checked out at ``where`` (None: a detached HEAD)."""
    done = run(where, "symbolic-ref", "--quiet", "--short", "HEAD", check=False)
    return done.stdout.strip() or None if done.returncode == 0 else None


def commit_of(where: Path, ref: str) -> str | None:
    """The commit ``ref`` names, or None when it names none."""
    done = run(where, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", check=False)
    return done.stdout.strip() or None if done.returncode == 0 else None


def branch_commit(where: Path, branch: str) -> str | None:
    """The commit of local branch ``branch``, or None when there is no such branch."""
    return commit_of(where, f"refs/heads/{branch}")


def tree_of(where: Path, commit: str) -> str:
    """The tree of ``commit``."""
    return output(where, "rev-parse", f"{commit}^{{tree}}")


def is_ancestor(where: Path, older: str, newer: str) -> bool:
    """Whether ``older`` is an ancestor of (or equal to) ``newer``."""
    return run(where, "merge-base", "--is-ancestor", older, newer, check=False).returncode == 0


def ahead_behind(where: Path, base: str, branch: str) -> tuple[int, int]:
    """How many commits ``branch`` has that ``base`` lacks, and the reverse."""
    behind, ahead = output(
        where, "rev-list", "--left-right", "--count", f"{base}...{branch}"
    ).split()
    return int(ahead), int(behind)


def changes(where: Path, *, untracked: bool = True) -> list[str]:
    """The paths with uncommitted changes at ``where`` (``git status --porcelain``)."""
    mode = "--untracked-files=all" if untracked else "--untracked-files=no"
    text = run(where, "status", "--porcelain", mode).stdout
    return [line[3:] for line in text.splitlines() if line]


@dataclass(frozen=True, slots=True)
class WorktreeEntry:
    """One line group of ``git worktree list --porcelain``."""

    path: Path
    head: str | None
    branch: str | None  # without refs/heads/; None: detached


def worktrees(where: Path) -> list[WorktreeEntry]:
    """Every worktree registered in ``where``'s repository (the main one first)."""
    entries: list[WorktreeEntry] = []
    fields: dict[str, str] = {}
    for line in [*output(where, "worktree", "list", "--porcelain").splitlines(), ""]:
        if line:
            name, _, value = line.partition(" ")
            fields[name] = value
            continue
        if "worktree" in fields:
            branch = fields.get("branch", "").removeprefix("refs/heads/") or None
            entries.append(WorktreeEntry(Path(fields["worktree"]), fields.get("HEAD"), branch))
        fields = {}
    return entries


def checkout_of(where: Path, branch: str) -> WorktreeEntry | None:
    """The worktree that has ``branch`` checked out, or None."""
    return next((w for w in worktrees(where) if w.branch == branch), None)


def entry_at(where: Path, path: Path) -> WorktreeEntry | None:
    """The registered worktree at ``path``, or None."""
    real = path.resolve()
    return next((w for w in worktrees(where) if w.path.resolve() == real), None)


def conflicted(where: Path) -> list[str]:
    """The unmerged paths of a merge in progress at ``where``."""
    text = output(where, "diff", "--name-only", "--diff-filter=U")
    return sorted(set(text.splitlines()))


def argv_text(args: Sequence[str]) -> str:
    """A git command as the user would type it (for messages)."""
    return " ".join([GIT, *args])
