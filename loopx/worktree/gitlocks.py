"""What a killed git leaves in a worktree's administrative files, and whether its owner is gone.

A ``git worktree add`` killed part way (SIGKILL, a power cut) leaves, in the
worktree's own git directory ``<repo>/.git/worktrees/<name>/``:

- ``locked`` reading "initializing": written first by ``git worktree add`` and
  removed as it ends; while it is there, ``git worktree prune`` keeps the entry;
- ``index.lock``, ``HEAD.lock``, ``ORIG_HEAD.lock``: the locks of the checkout
  (``git reset --hard``) that ``worktree add`` runs as a child;

and, in the repository, ``refs/heads/<branch>.lock`` of the branch it was
making. Every later git command there refuses to run while a lock stays.

A lock may go only when its owner is proven gone (:func:`holders`): the git
process LoopX recorded for the operation is not alive (its pid *and* start
time, :class:`loopx.process.ProcessIdentity`), and no other process holds the
repository (:func:`loopx.git.holders.holders`, the rule `goal merge` judges its
own locks by): none works inside the repository's git directory, none has a
file open under it, and no git program works in the repository or the
worktree. (Any other program whose working directory is the repository, a
person's shell or another goal's host, never touches a worktree's
administrative files; counting it would keep a dead lock for as long as a
terminal stays open there.) Processes of other users psutil cannot inspect
are not seen. A lock made after the processes were listed is never
judged dead (:func:`older_than`).

``doctor`` (:mod:`loopx.doctor.worktreecheck`) and the claim that makes a goal's
worktree (:mod:`loopx.worktree.creation`) both judge by these functions.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import psutil

from loopx.git.holders import Holder, holders
from loopx.process import ProcessIdentity

INITIALIZING: Final = "initializing"  # the reason `git worktree add` locks a worktree with
# The lock files a killed checkout leaves in a worktree's own git directory.
ADMIN_LOCKS: Final = ("index.lock", "HEAD.lock", "ORIG_HEAD.lock")
_PID_IN_REASON: Final = re.compile(r"\bpid\D{0,3}(\d+)", re.IGNORECASE)


def is_git(holder: Holder) -> bool:
    """Whether a holder is a git program (which ends by itself; anything else may not)."""
    return holder.name == "git" or holder.name.startswith("git-")


@dataclass(slots=True)
class Processes:
    """Who holds a repository (:func:`loopx.git.holders.holders`), and when that was asked.

    Args:
        exclude: pids never counted (the asking process and its ancestors are always left out).
    """

    exclude: frozenset[int] = frozenset()
    looked_at: float = 0.0  # time.time() when the processes were last listed

    def holding(self, repo: Path, gitdir: Path, worktree: Path | None) -> list[Holder]:
        """The live processes that hold ``repo`` (its common git directory ``gitdir``).

        A git program working in the repository's folder or the worktree's counts; any
        process working inside ``gitdir`` or with a file open under it counts.
        """
        self.looked_at = time.time()
        folders = [repo, *([worktree] if worktree is not None else [])]
        return holders(gitdir, folders, ignore=self.exclude | _self_and_ancestors())


def _self_and_ancestors() -> frozenset[int]:
    """The asking process and its ancestors: a claim run from the repository is no holder."""
    pids = {os.getpid()}
    with contextlib.suppress(psutil.Error):
        pids |= {p.pid for p in psutil.Process().parents()}
    return frozenset(pids)


def own_git_alive(pid: int | None, started_at: float | None) -> Holder | None:
    """LoopX's recorded git process, when that very process (pid and start time) still runs."""
    if pid is None or started_at is None:
        return None
    proc = ProcessIdentity(pid, started_at).find()
    if proc is None:
        return None
    try:
        name = proc.name()
    except psutil.Error:
        return None
    return Holder(pid, name, "is the git LoopX started for this operation")


def lock_reason_pid(reason: str) -> int | None:
    """The pid a worktree lock's reason names ("held by pid 123"), or None. Pure."""
    found = _PID_IN_REASON.search(reason)
    return int(found.group(1)) if found else None


def read_small(path: Path) -> str | None:
    """The first 4 KiB of a regular file, stripped; None when there is none (or a FIFO)."""
    try:
        if not path.is_file():
            return None
        with path.open("rb") as f:
            return f.read(4096).decode("utf-8", "replace").strip()
    except OSError:
        return None


def admin_dir(worktree: Path) -> Path | None:
    """The worktree's own git directory (``<repo>/.git/worktrees/<name>``), from its ``.git`` file."""
    text = read_small(worktree / ".git")
    if text is None:
        return None  # no .git file: not a linked worktree (or a directory: a repository)
    first = text.splitlines()[0] if text else ""
    if not first.startswith("gitdir:"):
        return None
    where = Path(first.removeprefix("gitdir:").strip())
    return where if where.is_absolute() else (worktree / where).resolve()


def admin_dirs_naming(common: Path, worktree: Path) -> list[Path]:
    """Every ``<common>/worktrees/<name>`` whose ``gitdir`` names ``worktree`` (made or half-made).

    Found from the repository's side, so also when the worktree's folder or
    its ``.git`` file was never written.
    """
    want = (worktree / ".git").resolve()
    found = []
    with contextlib.suppress(OSError):
        for entry in sorted((common / "worktrees").iterdir()):
            text = read_small(entry / "gitdir")
            if text and Path(text).resolve() == want:
                found.append(entry)
    return found


def leftover_locks(admin: Path) -> list[Path]:
    """The lock files a killed git may have left in a worktree's own git directory.

    ``locked`` counts only when it reads "initializing" (``git worktree add``'s own);
    a reason a person gave is theirs to remove.
    """
    found = [admin / name for name in ADMIN_LOCKS if (admin / name).exists()]
    if read_small(admin / "locked") == INITIALIZING:
        found.append(admin / "locked")
    return found


def branch_lock(common: Path, branch: str) -> Path | None:
    """``refs/heads/<branch>.lock`` when a killed ``git branch`` left it, else None."""
    path = common / "refs" / "heads" / f"{branch}.lock"
    return path if path.exists() else None


def older_than(path: Path, ts: float) -> bool:
    """Whether ``path`` was made before ``ts`` (one made later may belong to a live git)."""
    try:
        return path.stat().st_mtime < ts
    except OSError:
        return False


def remove_locks(paths: Iterable[Path], *, listed_at: float) -> list[Path]:
    """Remove the lock files made before ``listed_at``; the ones removed."""
    removed = []
    for path in paths:
        if not older_than(path, listed_at):
            continue
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
            removed.append(path)
    return removed


__all__ = [
    "ADMIN_LOCKS",
    "INITIALIZING",
    "Processes",
    "admin_dir",
    "admin_dirs_naming",
    "branch_lock",
    "is_git",
    "leftover_locks",
    "lock_reason_pid",
    "older_than",
    "own_git_alive",
    "read_small",
    "remove_locks",
]
