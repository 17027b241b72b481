"""Checks `goal add` makes at once, so a goal that cannot run is refused now, not hours later."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from loopx.errors import UsageError
from loopx.sandbox import unavailable


class GoalSetupError(UsageError):
    """A goal names a working directory or host program that does not exist."""

    def __init__(self, what: str, problem: str, hint: str) -> None:
        super().__init__(f"{what}: {problem}", hint=hint)
        self.what = what
        self.problem = problem


def check_workdir(workdir: Path) -> None:
    """Refuse a working directory that is missing or not a directory.

    Raises:
        GoalSetupError: ``workdir`` does not exist or is not a directory.
    """
    if not workdir.exists():
        raise GoalSetupError(
            f"workdir {workdir}",
            "does not exist",
            hint=f"create it first (`mkdir -p {workdir}`) or pass another --workdir",
        )
    if not workdir.is_dir():
        raise GoalSetupError(
            f"workdir {workdir}", "is not a directory", hint="pass a directory as --workdir"
        )


def check_program(program: str, workdir: Path | None, *, role: str = "host") -> None:
    """Refuse a host (or done-check, ``role``) program that cannot be started.

    A name without ``/`` is looked up on ``PATH``; a relative path is taken
    from the goal's working directory, where the host runs.

    Raises:
        GoalSetupError: the program is not found or not executable.
    """
    if "/" not in program:
        if shutil.which(program) is None:
            raise GoalSetupError(
                f"{role} program {program!r}",
                "was not found on PATH",
                hint=f"install {program}, or pass its full path in --{role}",
            )
        return
    path = Path(program)
    if not path.is_absolute() and workdir is not None:
        path = workdir / path
    if not path.is_file() or not os.access(path, os.X_OK):
        raise GoalSetupError(
            f"{role} program {path}",
            "is not an executable file",
            hint=f"check the path (relative paths start in the workdir); `chmod +x {path}`",
        )


def check_sandbox() -> None:
    """Refuse ``--sandbox bwrap`` where bubblewrap cannot run (:func:`loopx.sandbox.unavailable`).

    Raises:
        GoalSetupError: bwrap is missing or user namespaces are off.
    """
    refused = unavailable()
    if refused is not None:
        raise GoalSetupError("--sandbox bwrap", refused.problem, refused.fix)
