"""What ``loopx doctor`` reports, and the checker every per-layer check writes its findings to.

Every finding is typed: a severity, a code, the path, what is wrong and the
exact command or action that repairs it.
"""

from __future__ import annotations

import os
import shlex
import socket
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from loopx.errors import CorruptFileError, UnsafePathError
from loopx.model import Record
from loopx.root import Layout
from loopx.storage.files import read_bytes, read_model
from loopx.storage.jsonl import read_records


class Severity(StrEnum):
    """How much a finding matters."""

    ERROR = "error"  # damage, or a root LoopX must not trust
    WARNING = "warning"  # needs a human or `loopx recover`
    INFO = "info"  # a fact; needs nothing


class FindingCode(StrEnum):
    """What kind of problem a finding is."""

    ROOT_MISSING = "root_missing"
    NOT_INITIALISED = "not_initialised"  # a directory without a registry: commands refuse it
    PERMISSIONS = "permissions"  # mode broader than 0700/0600
    OWNER = "owner"  # not owned by the user running LoopX
    SYMLINK = "symlink"  # LoopX never follows it
    UNEXPECTED_ENTRY = "unexpected_entry"  # a name LoopX never writes where it sits
    SCHEMA = "schema"  # not JSON, or not the file kind's schema
    MISSING_FILE = "missing_file"
    EPOCH = "epoch"  # the fencing counter is behind a lease or journal
    STALE_LEASE = "stale_lease"  # a lease whose holder is gone
    INVALID_JOURNAL = "invalid_journal"  # recovery will quarantine it
    ORPHANED_JOURNAL = "orphaned_journal"  # in_progress with no live lease holder
    TORN_LINE = "torn_line"  # a JSON Lines file ends in a partial record
    STRAY_TEMP = "stray_temp"  # an atomic write's temp file whose writer died
    QUARANTINED = "quarantined"  # a file set aside for a human
    SUPERVISOR_DEAD = "supervisor_dead"  # supervisor.json says running; its process is gone
    SUPERVISOR_RUNNING = "supervisor_running"
    CRASH_LOOP = "crash_loop"
    STALE_HEARTBEAT = "stale_heartbeat"
    ORPHAN_GOAL = "orphan_goal"  # a goal directory without a goal file (goal.json)
    OLD_LAYOUT = "old_layout"  # a single-file registry of LoopX 0.x, migrated on the next open
    MISSING_RECORD = "missing_record"  # a finished turn's history/ledger line or state is absent
    LEFTOVER_PROCESS = "leftover_process"  # a live process of a turn that is finished
    FUTURE_DATED = "future_dated"  # written by a clock that ran ahead
    # the machine's faults: a clock behind, no inodes, a file where a directory belongs
    CLOCK_BEHIND = "clock_behind"  # this clock is behind the files the fleet just wrote
    NO_FREE_INODES = "no_free_inodes"  # the root's filesystem has no inode left
    NOT_A_DIRECTORY = "not_a_directory"  # the root (or a directory LoopX makes) is a file
    SANDBOX_UNAVAILABLE = "sandbox_unavailable"  # a sandboxed goal where bwrap cannot run
    WORKTREE_MISSING = "worktree_missing"  # a ready worktree's folder or repository is gone
    WORKTREE_UNREGISTERED = "worktree_unregistered"  # git no longer lists the worktree
    WORKTREE_WRONG_BRANCH = "worktree_wrong_branch"  # not on the goal's loopx/<id> branch
    WORKTREE_LOCKED = "worktree_locked"  # a worktree lock or index.lock of a git that is gone
    ACCOUNT_DAMAGED = "account_damaged"  # an account's file cannot be read: its goals wait
    LINK_BASE = "link_base"  # the notifications' links point nowhere, or at a dead address
    MERGE_UNFINISHED = "merge_unfinished"  # a goal's merge stopped part way; its process is gone


class Finding(Record):
    """One thing doctor found, and how to repair it."""

    severity: Severity
    code: FindingCode
    path: str
    problem: str
    repair: str  # the exact command, or the action, that fixes it ("" for info)
    goal_id: str | None = None


class DoctorReport(Record):
    """``loopx doctor --json``."""

    schema_version: Literal[1] = 1
    root: str
    healthy: bool
    counts: dict[Severity, int]
    files_checked: int
    goals_checked: int
    journals_checked: int
    findings: list[Finding]


def q(path: Path | str) -> str:
    """A path quoted for a shell command line."""
    return shlex.quote(str(path))


def listed_files(directory: Path, suffix: str) -> list[Path]:
    """The files of ``directory`` named ``*suffix`` (not dotfiles), sorted; none through a symlink."""
    if not directory.is_dir() or directory.is_symlink():
        return []
    names = sorted(os.listdir(directory))
    return [directory / n for n in names if n.endswith(suffix) and not n.startswith(".")]


@dataclass(slots=True)
class Checker:
    """The findings so far and what was counted; the checks add to it."""

    layout: Layout
    now: datetime
    hostname: str = field(default_factory=socket.gethostname)
    findings: list[Finding] = field(default_factory=list)
    files: int = 0
    goals: int = 0
    journals: int = 0

    def add(  # noqa: PLR0917 - a finding reads as one positional sentence at every call
        self,
        severity: Severity,
        code: FindingCode,
        path: Path | str,
        problem: str,
        repair: str = "",
        goal_id: str | None = None,
    ) -> None:
        """Record one finding."""
        self.findings.append(
            Finding(
                severity=severity,
                code=code,
                path=str(path),
                problem=problem,
                repair=repair,
                goal_id=goal_id,
            )
        )

    def model(
        self,
        path: Path,
        model: type[BaseModel],
        repair: str,
        *,
        severity: Severity = Severity.ERROR,
        goal_id: str | None = None,
        code: FindingCode = FindingCode.SCHEMA,
        why: str = "",
    ) -> BaseModel | None:
        """Read and validate one file; a failure becomes a finding (its problem, then ``why``)."""
        try:
            return read_model(path, model)
        except FileNotFoundError:
            return None
        except CorruptFileError as e:
            self.add(severity, code, path, e.problem + why, repair, goal_id)
        except (UnsafePathError, OSError) as e:
            self.add(Severity.ERROR, code, path, f"cannot be read: {e}{why}", repair, goal_id)
        return None

    def lines(
        self, path: Path, model: type[Record], goal_id: str, repair: str
    ) -> list[Record] | None:
        """A JSON Lines file's records; None (and a finding) when it is damaged."""
        try:
            records = read_records(path, model)
            data = read_bytes(path) if path.exists() else b""
        except CorruptFileError as e:
            self.add(Severity.ERROR, FindingCode.SCHEMA, path, e.problem, repair, goal_id)
            return None
        except (UnsafePathError, OSError) as e:
            self.add(
                Severity.ERROR, FindingCode.SCHEMA, path, f"cannot be read: {e}", repair, goal_id
            )
            return None
        if data and not data.endswith(b"\n"):
            self.add(
                Severity.INFO,
                FindingCode.TORN_LINE,
                path,
                "ends in a partial record (a writer died mid-append); readers skip it and "
                "the next append cuts it off",
                "",
                goal_id,
            )
        for record in records:
            if getattr(record, "goal_id", goal_id) != goal_id:
                self.add(
                    Severity.ERROR,
                    FindingCode.SCHEMA,
                    path,
                    f"a line of turn {getattr(record, 'turn_key', '?')} names goal "
                    f"{getattr(record, 'goal_id', '?')!r}",
                    repair,
                    goal_id,
                )
                break
        return records
