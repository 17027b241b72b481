"""A worktree goal's worktree as git sees it: registered, on its branch, not locked by a dead git.

The files inside a goal's worktree belong to the repository: git chose their
modes and tracks the executable bit, so a ``chmod 600`` there is a change
``goal merge`` refuses to merge over. The root walk (:mod:`loopx.doctor.files`)
therefore leaves every worktree folder under ``<root>/worktrees`` alone, and
doctor checks instead, for each goal with ``--worktree``:

- ``worktree_missing``: its record says ready, but the folder or the repository is gone;
- ``worktree_unregistered``: the folder is there, but ``git worktree list`` of the
  repository does not name it;
- ``worktree_wrong_branch``: git lists it on another branch, or on a detached HEAD;
- ``worktree_locked``: a lock whose owner is gone: the worktree's ``locked`` file
  (git's own "initializing", written by ``git worktree add`` and removed when it
  ends, or a reason that names a pid), or its ``index.lock``.

An "initializing" lock or an ``index.lock`` belongs to a git process; its
owner is gone when no live git process works in the repository or the
worktree (psutil, by the process's working directory). A lock whose reason
names neither is a person's (``git worktree lock --reason``) and is reported
as information only.

Read-only, except :func:`repair_worktree_locks` (``doctor --repair``): it
removes the locks found dead, and only those created before it looked at the
processes. A lock is git's administrative file, never a tracked one, so
``git status`` of the worktree is the same before and after.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import psutil

from loopx import git
from loopx.doctor.findings import Checker, FindingCode, Severity, q
from loopx.errors import CorruptFileError, LoopxError, UnsafePathError
from loopx.registry.model import Goal
from loopx.registry.worktree_record import (
    WorktreePhase,
    WorktreeRecord,
    read_record,
    record_file,
)
from loopx.root import Layout

INITIALIZING: Final = "initializing"  # the reason `git worktree add` locks a worktree with
_PID_IN_REASON: Final = re.compile(r"\bpid\D{0,3}(\d+)", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class DeadLock:
    """A lock file of a worktree whose owner is gone."""

    path: Path  # the ``locked`` or ``index.lock`` file
    what: str  # what it is, in words
    repair: str  # the command that removes it by hand


@dataclass(slots=True)
class GitProcesses:
    """The live git processes and the folders they work in, listed at the first question only."""

    looked_at: float = 0.0  # time.time() when the processes were listed
    _cwds: list[Path] | None = field(default=None, repr=False)

    def working_in(self, *folders: Path) -> bool:
        """Whether a live git process works in (or under) any of ``folders``."""
        if self._cwds is None:
            self.looked_at = time.time()
            self._cwds = _git_cwds()
        wanted = [f.resolve() for f in folders]
        return any(cwd == f or f in cwd.parents for cwd in self._cwds for f in wanted)


def _git_cwds() -> list[Path]:
    """The working directories of the live git processes (git, git-*) of any user we can see."""
    cwds = []
    me = os.getpid()
    for proc in psutil.process_iter(["name", "cwd", "status"]):
        info = proc.info
        name = info.get("name") or ""
        if proc.pid == me or not (name == "git" or name.startswith("git-")):
            continue
        if info.get("status") == psutil.STATUS_ZOMBIE or not info.get("cwd"):
            continue
        cwds.append(Path(info["cwd"]))
    return cwds


def lock_reason_pid(reason: str) -> int | None:
    """The pid a worktree lock's reason names ("held by pid 123"), or None. Pure."""
    found = _PID_IN_REASON.search(reason)
    return int(found.group(1)) if found else None


def admin_dir(worktree: Path) -> Path | None:
    """The worktree's own git directory (``<repo>/.git/worktrees/<name>``), from its ``.git`` file."""
    text = _read_small(worktree / ".git")
    if text is None:
        return None  # no .git file: not a linked worktree (or a directory: a repository)
    first = text.splitlines()[0] if text else ""
    if not first.startswith("gitdir:"):
        return None
    where = Path(first.removeprefix("gitdir:").strip())
    return where if where.is_absolute() else (worktree / where).resolve()


def dead_locks(
    repo: Path, worktree: Path, gitdir: Path, procs: GitProcesses
) -> tuple[list[DeadLock], str | None]:
    """The locks of one worktree whose owner is gone, and a person's lock reason if it has one.

    Args:
        repo: the repository's top folder.
        worktree: the worktree's folder.
        gitdir: its own git directory (:func:`admin_dir`).
        procs: the live git processes, looked up at the first question.

    Returns:
        The dead locks (each created before ``procs`` was looked at), and the reason of a
        lock no process owns (a person's), or None.
    """
    found: list[DeadLock] = []
    person: str | None = None
    locked, index = gitdir / "locked", gitdir / "index.lock"
    reason = _read_small(locked)
    if reason is not None:
        pid = lock_reason_pid(reason)
        if pid is not None:
            if not psutil.pid_exists(pid):
                found.append(
                    DeadLock(
                        locked,
                        f"locked ({reason!r}) by pid {pid}, which is no longer running",
                        f"git -C {q(repo)} worktree unlock {q(worktree)}",
                    )
                )
        elif reason == INITIALIZING:
            if not procs.working_in(repo, worktree, gitdir) and _older(locked, procs):
                found.append(
                    DeadLock(
                        locked,
                        "locked as 'initializing' by a `git worktree add` that is gone (no "
                        "git process works in the repository)",
                        f"git -C {q(repo)} worktree unlock {q(worktree)}",
                    )
                )
        else:
            person = reason or "(no reason given)"
    if index.exists() and not procs.working_in(repo, worktree, gitdir) and _older(index, procs):
        found.append(
            DeadLock(
                index,
                "git's index.lock, left by a git process that is gone (no git process works "
                "in the repository); every git command there refuses to run until it goes",
                f"rm {q(index)}",
            )
        )
    return found, person


def _read_small(path: Path) -> str | None:
    """The first 4 KiB of a regular file, stripped; None when there is none (or a FIFO)."""
    try:
        if not path.is_file():
            return None
        with path.open("rb") as f:
            return f.read(4096).decode("utf-8", "replace").strip()
    except OSError:
        return None


def _older(path: Path, procs: GitProcesses) -> bool:
    """Whether ``path`` was made before the git processes were listed (a later one may be live)."""
    try:
        return path.stat().st_mtime < procs.looked_at
    except OSError:
        return False


def check_worktree(doc: Checker, goal: Goal) -> None:
    """Check one worktree goal's worktree: registered, on its branch, no lock of a dead git.

    One ``git worktree list`` of its repository; the processes are listed only when a
    lock file is there to judge.
    """
    if goal.worktree is None:
        return
    layout = doc.layout
    try:
        record = read_record(layout, goal.id)
    except (CorruptFileError, UnsafePathError) as e:
        doc.add(
            Severity.ERROR,
            FindingCode.SCHEMA,
            record_file(layout, goal.id),
            str(e),
            "restore it from a backup; do not remove it while the worktree holds work (a "
            "claim without a ready record completes the checkout, which resets the folder)",
            goal.id,
        )
        return
    if record is None:
        return  # never claimed: nothing made yet
    path, repo = Path(record.path), Path(record.repo)
    entries = _listed(repo)
    if entries is None:
        if record.phase is WorktreePhase.READY:
            doc.add(
                Severity.WARNING,
                FindingCode.WORKTREE_MISSING,
                repo,
                f"the repository of the goal's worktree is gone or no longer a git "
                f"repository; the goal's commits are on its branch {record.branch} there",
                f"restore the repository at {q(repo)}",
                goal.id,
            )
        return
    entry = next((e for e in entries if e.path.resolve() == path.resolve()), None)
    if record.phase is WorktreePhase.READY:
        _check_ready(doc, record, entry)
    gitdir = admin_dir(path) if path.is_dir() else None
    if gitdir is None or not gitdir.is_dir():
        return
    locks, person = dead_locks(repo, path, gitdir, GitProcesses())
    for lock in locks:
        doc.add(
            Severity.WARNING,
            FindingCode.WORKTREE_LOCKED,
            lock.path,
            f"{lock.what}; turns and merges of the goal fail on it",
            f"{lock.repair}  (or `loopx doctor --repair`)",
            goal.id,
        )
    if person is not None:
        doc.add(
            Severity.INFO,
            FindingCode.WORKTREE_LOCKED,
            gitdir / "locked",
            f"locked by hand ({person!r}); turns still run in it, `goal worktree --remove` "
            "refuses it",
            f"git -C {q(repo)} worktree unlock {q(path)}  (once the reason is over)",
            goal.id,
        )


def _listed(repo: Path) -> list[git.WorktreeEntry] | None:
    """``git worktree list`` of ``repo``; None when it is gone or no repository."""
    if not repo.is_dir():
        return None
    try:
        return git.worktrees(repo)
    except LoopxError:  # git refused: not a repository any more
        return None


def _check_ready(doc: Checker, record: WorktreeRecord, entry: git.WorktreeEntry | None) -> None:
    """The checks of a worktree the record says is made: there, registered, on its branch."""
    path, repo, branch = Path(record.path), Path(record.repo), record.branch
    if not path.is_dir():
        doc.add(
            Severity.WARNING,
            FindingCode.WORKTREE_MISSING,
            path,
            f"the goal's worktree is gone (removed outside LoopX); its commits are on "
            f"branch {branch}, and its turns fail until it is back",
            f"git -C {q(repo)} worktree prune && git -C {q(repo)} worktree add {q(path)} "
            f"{q(branch)}",
            record.goal_id,
        )
        return
    if entry is None:
        spare = path.with_name(path.name + ".reregister")
        doc.add(
            Severity.WARNING,
            FindingCode.WORKTREE_UNREGISTERED,
            path,
            f"git does not list this folder as a worktree of {repo} (its registration "
            "was removed or pruned), so git commands in it fail; its files are intact",
            f"git -C {q(repo)} worktree add --no-checkout {q(spare)} {q(branch)} && "
            f"mv {q(spare / '.git')} {q(path / '.git')} && rmdir {q(spare)} && "
            f"git -C {q(repo)} worktree repair {q(path)} && git -C {q(path)} reset -q  "
            "(registers the folder again on its branch; its files, and any uncommitted "
            "change in them, stay as they are)",
            record.goal_id,
        )
        return
    if entry.branch != branch:
        on = f"branch {entry.branch}" if entry.branch else "a detached HEAD"
        doc.add(
            Severity.WARNING,
            FindingCode.WORKTREE_WRONG_BRANCH,
            path,
            f"the worktree is on {on}, not the goal's branch {branch}: its turns would "
            f"commit there, and `goal merge` merges {branch}",
            f"git -C {q(path)} switch {q(branch)}  (commit or move what is there first)",
            record.goal_id,
        )


def repair_worktree_locks(layout: Layout, goals: list[Goal]) -> list[Path]:
    """Remove the worktree locks whose owner is gone (``doctor --repair``); the files removed.

    Only git's administrative files go (``locked``, ``index.lock``), and only
    those :func:`dead_locks` finds dead; no tracked file changes.
    """
    procs = GitProcesses()
    removed: list[Path] = []
    for goal in goals:
        if goal.worktree is None:
            continue
        try:
            record = read_record(layout, goal.id)
        except (CorruptFileError, UnsafePathError):
            continue  # reported by doctor; nothing to repair blindly
        if record is None:
            continue
        path = Path(record.path)
        gitdir = admin_dir(path) if path.is_dir() else None
        if gitdir is None or not gitdir.is_dir():
            continue
        locks, _person = dead_locks(Path(record.repo), path, gitdir, procs)
        for lock in locks:
            with contextlib.suppress(FileNotFoundError):
                lock.path.unlink()
                removed.append(lock.path)
    return removed


__all__ = [
    "DeadLock",
    "GitProcesses",
    "admin_dir",
    "check_worktree",
    "dead_locks",
    "lock_reason_pid",
    "repair_worktree_locks",
]
