"""A worktree goal's worktree as git sees it: registered, on its branch, not locked by a dead git.

The files inside a goal's worktree belong to the repository: git chose their
modes and tracks the executable bit, so a ``chmod 600`` there is a change
``goal merge`` refuses to merge over. The root walk (:mod:`loopx.doctor.rootfiles`)
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
owner is gone when the git LoopX recorded for the goal's worktree is not
alive and no process holds the repository: the judgement the claim makes
before it removes such a lock (:mod:`loopx.worktree.gitlocks`, one rule for
both). A lock whose reason names neither is a person's (``git worktree lock
--reason``) and is reported as information only.

Read-only, except :func:`repair_worktree_locks` (``doctor --repair``): it
removes the locks found dead, and only those created before it looked at the
processes. A lock is git's administrative file, never a tracked one, so
``git status`` of the worktree is the same before and after.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

import psutil

from loopx import git
from loopx.doctor.findings import Checker, FindingCode, Severity, q
from loopx.errors import CorruptFileError, LoopxError, UnsafePathError
from loopx.git.holders import Holder
from loopx.registry.goalrecords import Goal
from loopx.registry.worktree_record import (
    WorktreePhase,
    WorktreeRecord,
    read_record,
    record_file,
)
from loopx.root import Layout
from loopx.worktree.gitlocks import (
    ADMIN_LOCKS,
    INITIALIZING,
    Processes,
    admin_dir,
    lock_reason_pid,
    older_than,
    own_git_alive,
    read_small,
)
from loopx.worktree.gitrun import read_run


@dataclass(frozen=True, slots=True)
class DeadLock:
    """A lock file of a worktree whose owner is gone."""

    path: Path  # the ``locked`` or ``index.lock`` file
    what: str  # what it is, in words
    repair: str  # the command that removes it by hand


def dead_locks(
    repo: Path, worktree: Path, gitdir: Path, procs: Processes, own: Holder | None = None
) -> tuple[list[DeadLock], str | None]:
    """The locks of one worktree whose owner is gone, and a person's lock reason if it has one.

    Args:
        repo: the repository's top folder.
        worktree: the worktree's folder.
        gitdir: its own git directory (:func:`loopx.worktree.gitlocks.admin_dir`).
        procs: the live processes, looked up at the first question.
        own: LoopX's recorded git of the goal's worktree, when it still runs.

    Returns:
        The dead locks (each created before ``procs`` was looked at), and the reason of a
        lock no process owns (a person's), or None.
    """
    found: list[DeadLock] = []
    person: str | None = None
    unlock = f"git -C {q(repo)} worktree unlock {q(worktree)}"
    owned: list[DeadLock] = []  # a git's locks: dead once nothing holds the repository
    locked = gitdir / "locked"
    reason = read_small(locked)
    if reason is not None:
        pid = lock_reason_pid(reason)
        if pid is not None:
            if not psutil.pid_exists(pid):
                what = f"locked ({reason!r}) by pid {pid}, which is no longer running"
                found.append(DeadLock(locked, what, unlock))
        elif reason == INITIALIZING:
            what = "locked as 'initializing' by a `git worktree add` that is gone"
            owned.append(DeadLock(locked, what, unlock))
        else:
            person = reason or "(no reason given)"
    for name in ADMIN_LOCKS:
        path = gitdir / name
        if path.exists():
            what = f"git's {name}, left by a git process that is gone"
            owned.append(DeadLock(path, what, f"rm {q(path)}"))
    if owned and own is None and not procs.holding(repo, gitdir.parent.parent, worktree):
        found += [
            DeadLock(
                lock.path,
                f"{lock.what} (no process holds the repository); every git command there "
                "refuses to run until it goes",
                lock.repair,
            )
            for lock in owned
            if older_than(lock.path, procs.looked_at)
        ]
    return found, person


def _own_git(layout: Layout, goal_id: str) -> Holder | None:
    run = read_run(layout, goal_id)
    return own_git_alive(run.pid, run.pid_started_at) if run is not None else None


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
    locks, person = dead_locks(repo, path, gitdir, Processes(), _own_git(layout, goal.id))
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
    procs = Processes()
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
        own = _own_git(layout, goal.id)
        locks, _person = dead_locks(Path(record.repo), path, gitdir, procs, own)
        for lock in locks:
            with contextlib.suppress(FileNotFoundError):
                lock.path.unlink()
                removed.append(lock.path)
    return removed


__all__ = [
    "DeadLock",
    "check_worktree",
    "dead_locks",
    "repair_worktree_locks",
]
