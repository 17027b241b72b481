"""The workdir lock's files: the hold and wait records, and where each lives.

``workdirs/<key>.json`` is a hold (``key``: a digest of the workdir's real
path), ``workdirs/<key>.below/`` and ``workdirs/<key>.waiters/`` its markers,
and ``goals/<id>/turns/.workdir-wait.json`` a goal's wait. How they are taken,
released and judged: :mod:`loopx.turn.workdir`. Status reads them from here.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Final, Literal

from pydantic import Field

from loopx.errors import CorruptFileError
from loopx.model import Record, UtcDatetime
from loopx.root import Layout
from loopx.storage.files import read_model_or_none

# In turns/ (a dot file, which journal listings skip) so that writing or removing it
# moves the directory's mtime, part of the status fingerprint: a hinted refresh sees it.
WAIT_FILE: Final = "turns/.workdir-wait.json"


class WorkdirHold(Record):
    """``workdirs/<key>.json``: the goal whose turn holds a workdir now."""

    schema_version: Literal[1] = 1
    path: str  # the real path
    goal_id: str
    epoch: int  # the goal's lease epoch: the hold is stale once that lease is gone
    agent_id: str
    acquired_at: UtcDatetime


class WorkdirWait(Record):
    """``goals/<id>/turns/.workdir-wait.json``: the goal waits for another goal's turn to end."""

    schema_version: Literal[1] = 1
    workdir: str
    holder_goal_id: str
    holder_path: str  # the held directory: the same one, or one inside or above it
    since: UtcDatetime
    # Set: the holder's turn is over (its agent died) but these processes of it still run;
    # they are killed before this goal's turn starts there.
    processes: list[int] = Field(default_factory=list)

    def describe(self) -> str:
        """The status line of a goal that waits."""
        if self.processes:
            pids = " ".join(str(p) for p in self.processes)
            return (
                "waiting for the previous turn's processes to exit "
                f"(goal {self.holder_goal_id}'s turn: pids {pids})"
            )
        return f"workdir busy: goal {self.holder_goal_id} runs a turn there"


def workdir_key(path: str) -> str:
    """The file-name key of a real path. Pure."""
    return hashlib.sha256(path.encode("utf-8", "surrogateescape")).hexdigest()[:32]


def real_workdir(workdir: str) -> str:
    """The real path the lock is taken on (symlinks resolved)."""
    return os.path.realpath(workdir)


def ancestors(path: str) -> list[str]:
    """The directories above ``path``, nearest first. Pure."""
    out, current = [], os.path.dirname(path)
    while current and current != path:
        out.append(current)
        path, current = current, os.path.dirname(current)
    return out


def holds_dir(layout: Layout) -> Path:
    """``workdirs/``: the holds, and each hold's markers and waiters."""
    return layout.root / "workdirs"


def hold_file(layout: Layout, path: str) -> Path:
    """``workdirs/<key>.json``: the hold of the real path ``path``."""
    return holds_dir(layout) / f"{workdir_key(path)}.json"


def below_dir(layout: Layout, ancestor: str) -> Path:
    """``workdirs/<key>.below/``: a marker per held directory inside ``ancestor``."""
    return holds_dir(layout) / f"{workdir_key(ancestor)}.below"


def waiters_dir(layout: Layout, path: str) -> Path:
    """``workdirs/<key>.waiters/``: a marker per goal that waits for the hold of ``path``."""
    return holds_dir(layout) / f"{workdir_key(path)}.waiters"


def wait_file(layout: Layout, goal_id: str) -> Path:
    """``goals/<id>/turns/.workdir-wait.json``."""
    return layout.goal_dir(goal_id) / WAIT_FILE


def read_wait(layout: Layout, goal_id: str) -> WorkdirWait | None:
    """The goal's workdir wait, if it waits (a damaged file reads as none)."""
    try:
        return read_model_or_none(wait_file(layout, goal_id), WorkdirWait)
    except CorruptFileError:
        return None


def read_hold(path: Path) -> WorkdirHold | None:
    """The hold in ``path``, or None (none, or a damaged file: nobody holds it)."""
    try:
        return read_model_or_none(path, WorkdirHold)
    except CorruptFileError:
        return None  # a create cut short: nobody holds it
