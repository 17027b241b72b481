"""Who holds a git repository: the proof that a lock a killed git left may be removed.

A lock git leaves behind when it is killed (``index.lock``, a ref's
``.lock``, a worktree's ``locked`` file) may be removed only when

1. the processes that could own it are gone: the git process and the LoopX
   process that started it, each named by the pid and start time LoopX
   recorded before it waited on them (a recycled pid is another process), and
2. no other live process holds the repository: none has a file under its git
   directory open, none works inside its git directory, and no git process
   works in the repository's folders (``git -C DIR`` works in ``DIR``), which
   also finds a git whose pid was never recorded.

:func:`holders` answers (2) with psutil; it costs one pass over the processes,
so callers ask only when there is a lock to judge.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

from loopx.process import ProcessIdentity


@dataclass(frozen=True, slots=True)
class Holder:
    """A live process that holds a repository, and how."""

    pid: int
    name: str
    how: str  # "works in <dir>", "has <file> open"

    def describe(self) -> str:
        """The holder in words, for a message."""
        return f"pid {self.pid} ({self.name}) {self.how}"


def gone(*identities: ProcessIdentity | None) -> bool:
    """Whether none of the recorded processes still runs (None: nothing was recorded)."""
    return not any(i is not None and i.alive() for i in identities)


def _inside(path: Path, folders: Sequence[Path]) -> Path | None:
    return next((f for f in folders if path == f or f in path.parents), None)


def holders(
    git_dir: Path, folders: Sequence[Path], *, ignore: Collection[int] = ()
) -> list[Holder]:
    """The live processes holding a repository (see the module's rule (2)).

    Args:
        git_dir: the repository's common git directory.
        folders: its work folders (the top, worktrees, a scratch worktree): a git
            process working in one of them holds the repository.
        ignore: pids that are not holders (the caller itself).

    Returns:
        Every holder found (zombies and the caller excepted).
    """
    skip = {os.getpid(), *ignore}
    git_dirs = [git_dir.resolve()]
    work = [f.resolve() for f in folders]
    found: list[Holder] = []
    for proc in psutil.process_iter(["name", "cwd", "status"]):
        if proc.pid in skip or proc.info.get("status") == psutil.STATUS_ZOMBIE:
            continue
        name = proc.info.get("name") or "?"
        cwd = Path(proc.info["cwd"]) if proc.info.get("cwd") else None
        is_git = name == "git" or name.startswith("git-")
        if cwd is not None and (_inside(cwd, git_dirs) or (is_git and _inside(cwd, work))):
            found.append(Holder(proc.pid, name, f"works in {cwd}"))
            continue
        try:
            files = proc.open_files()
        except psutil.Error:
            continue  # another user's, or gone meanwhile
        opened = next((f.path for f in files if _inside(Path(f.path), git_dirs)), None)
        if opened is not None:
            found.append(Holder(proc.pid, name, f"has {opened} open"))
    return found


__all__ = ["Holder", "gone", "holders"]
