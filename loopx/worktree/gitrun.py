"""A git command of a goal's worktree operation, journaled before it starts.

``goals/<id>/worktree-git.json`` (:class:`GitRun`) names the command and the
folder it runs in, written before the process starts, then again with the
git process's pid and start time as soon as it exists. A later claim reads
it to tell LoopX's own git, still running after the process that started it
was killed, from a git that is gone (:func:`loopx.worktree.gitlocks.own_git_alive`):
only then are the locks it left judged (:mod:`loopx.worktree.gitlocks`).

A kill between the two writes leaves a record without a pid: the git (if it
started) works in the repository, where :meth:`loopx.worktree.gitlocks.Processes.holding`
sees it.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Final, Literal

from loopx import git
from loopx.errors import CorruptFileError, GitError
from loopx.faults import fault_point
from loopx.model import Record, UtcDatetime, utcnow
from loopx.process import started_at
from loopx.root import Layout
from loopx.storage.files import atomic_write_model, read_model_or_none
from loopx.turn.fencing import Fence

RECORD_NAME: Final = "worktree-git.json"
TIMED_OUT: Final = 124  # the exit code reported for a git killed at TIMEOUT_S (as timeout(1))
TIMEOUT_S: Final = 300.0  # as loopx.git's: a worktree's checkout ends by then, or is killed


class GitRun(Record):
    """``goals/<id>/worktree-git.json``: the newest git command of the goal's worktree operation."""

    schema_version: Literal[1] = 1
    goal_id: str
    argv: list[str]  # git's arguments after ``-C <cwd>``
    cwd: str
    pid: int | None = None  # None: written before the process existed
    pid_started_at: float | None = None  # psutil create_time(): a recycled pid is not it
    started_at: UtcDatetime


def run_file(layout: Layout, goal_id: str) -> Path:
    """``goals/<id>/worktree-git.json``."""
    return layout.goal_dir(goal_id) / RECORD_NAME


def read_run(layout: Layout, goal_id: str) -> GitRun | None:
    """The goal's recorded git command (a damaged record reads as none: its git is long gone)."""
    try:
        return read_model_or_none(run_file(layout, goal_id), GitRun)
    except CorruptFileError:
        return None


def forget_run(layout: Layout, goal_id: str) -> None:
    """Remove the record once the operation is complete (nothing is left to judge)."""
    run_file(layout, goal_id).unlink(missing_ok=True)


def run_recorded(layout: Layout, goal_id: str, fence: Fence, where: Path, *args: str) -> None:
    """``git -C where args...``, recorded before it starts and with its pid once it runs.

    Raises:
        GitError: git failed (or was killed: a negative exit code).
        WorktreeError: git is not installed.
        LeaseLostError: the claim was taken over.
    """
    record = GitRun(goal_id=goal_id, argv=list(args), cwd=str(where), started_at=utcnow())
    with fence.held():
        atomic_write_model(run_file(layout, goal_id), record)
    proc = git.start(where, *args)
    with proc:
        try:
            running = record.model_copy(
                update={"pid": proc.pid, "pid_started_at": started_at(proc.pid)}
            )
            atomic_write_model(run_file(layout, goal_id), running)
            fault_point("worktree:git_started")
            _out, err = proc.communicate(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired as e:
            proc.kill()
            raise GitError(
                [git.GIT, *args], where, TIMED_OUT, f"no end after {TIMEOUT_S:.0f} s"
            ) from e
        except BaseException:
            proc.kill()  # never leave our git behind an error of ours (it is waited for below)
            raise
    if proc.returncode != 0:
        raise GitError([git.GIT, *args], where, proc.returncode, err)


__all__ = ["RECORD_NAME", "GitRun", "forget_run", "read_run", "run_file", "run_recorded"]
