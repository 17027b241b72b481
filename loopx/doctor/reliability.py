"""``loopx doctor``'s reliability checks: live processes of finished turns, future-dated entries."""

from __future__ import annotations

import contextlib
import os
from typing import Final

import psutil
from pydantic import BaseModel

from loopx import environ
from loopx.clock import FUTURE_TOLERANCE, clamp_state
from loopx.doctor.findings import Checker, FindingCode, Severity
from loopx.errors import LoopxError
from loopx.ids import is_valid_goal_id
from loopx.model import Record
from loopx.quota.ledger import SpendRecord
from loopx.root import Layout
from loopx.state import GoalState
from loopx.storage.files import read_model
from loopx.turn.journal import TurnJournal, journal_path
from loopx.turn.outcome import TurnStatus


def leftover_processes(layout: Layout) -> list[tuple[psutil.Process, str, str]]:
    """Live processes carrying this root's turn variables whose turn is not in progress.

    Returns:
        (process, goal id, turn key) for each; reads every process's environment.

    """
    root = str(layout.root)
    out = []
    for proc in psutil.process_iter():
        try:
            env = proc.environ()
            if env.get(environ.ROOT) != root or proc.status() == psutil.STATUS_ZOMBIE:
                continue
        except psutil.Error:
            continue
        key, goal_id = env.get(environ.TURN_KEY), env.get(environ.GOAL_ID)
        if not key or not goal_id or not is_valid_goal_id(goal_id):
            continue
        try:
            journal = read_model(journal_path(layout, goal_id, key), TurnJournal)
        except (FileNotFoundError, LoopxError, OSError):
            journal = None
        if journal is None or journal.status is not TurnStatus.IN_PROGRESS:
            out.append((proc, goal_id, key))
    return out


def check_leftover_processes(doc: Checker) -> None:
    """Report every live process of a finished (or unknown) turn of this root."""
    for proc, goal_id, key in leftover_processes(doc.layout):
        doc.add(
            Severity.WARNING,
            FindingCode.LEFTOVER_PROCESS,
            f"pid {proc.pid}",
            f"process {proc.pid} still runs for turn {key}, which is finished or unknown",
            f"kill -9 {proc.pid}",
            goal_id,
        )


def check_future_dated(
    doc: Checker, goal_id: str, state: BaseModel | None, ledger: list[Record] | None
) -> None:
    """Entries dated ahead of now: a clock ran ahead when they were written."""
    limit = doc.now + FUTURE_TOLERANCE
    if isinstance(state, GoalState) and clamp_state(state, now=doc.now) is not None:
        doc.add(
            Severity.WARNING,
            FindingCode.FUTURE_DATED,
            doc.layout.state_file(goal_id),
            f"dated {state.updated_at.isoformat() if state.updated_at else '?'}, "
            "ahead of this clock: a clock ran ahead when it was written, or this one is "
            "behind (see clock_behind)",
            "loopx doctor --repair  (shifts the state's times back to now)",
            goal_id,
        )
    ahead = [r for r in ledger or [] if isinstance(r, SpendRecord) and r.ended_at > limit]
    if ahead:
        # Info, not a warning: the ledger is a projection of the journals, so nothing
        # may rewrite it, and a record dated ahead only counts in the quota window
        # longer; a root repaired by `doctor --repair` is then healthy.
        doc.add(
            Severity.INFO,
            FindingCode.FUTURE_DATED,
            doc.layout.quota_file(goal_id),
            f"{len(ahead)} spend record(s) dated ahead of this clock (newest "
            f"{max(r.ended_at for r in ahead).isoformat()}): they stay in the quota "
            "window that much longer",
            "check the clocks of the machines running agents; the records leave the "
            "window at their own dates",
            goal_id,
        )


# A fleet file dated further than this into doctor's future means doctor's clock is behind.
_BEHIND_S: Final = 2.0


def check_clock_behind(doc: Checker) -> None:
    """Compare doctor's clock with the newest heartbeat or supervisor record.

    Read-only: agents write their heartbeat every few seconds on a clock
    calibrated to the files', so one dated in this clock's future says this
    clock is behind; states and journals dated ahead of it are then not
    "a clock that ran ahead".
    """
    newest = 0.0
    candidates = [doc.layout.root / "supervisor.json"]
    with contextlib.suppress(OSError):
        candidates += [e for e in doc.layout.agents_dir.iterdir() if e.suffix == ".json"]
    for path in candidates:
        with contextlib.suppress(OSError):
            newest = max(newest, path.lstat().st_mtime)
    ahead = newest - doc.now.timestamp()
    if ahead > _BEHIND_S:
        doc.add(
            Severity.WARNING,
            FindingCode.CLOCK_BEHIND,
            doc.layout.agents_dir,
            f"this clock is {ahead:.0f} s behind the files the fleet wrote last; times "
            "recorded ahead of it are waits it cannot measure (agents count them as served)",
            "fix the system clock (timedatectl, chrony); nothing needs repair",
        )


def check_free_inodes(doc: Checker) -> None:
    """A root whose filesystem has no free inode is not healthy, whatever space is free."""
    try:
        st = os.statvfs(doc.layout.root)
    except OSError:
        return
    if st.f_files > 0 and st.f_favail == 0:
        doc.add(
            Severity.ERROR,
            FindingCode.NO_FREE_INODES,
            doc.layout.root,
            f"no free inodes on the root's filesystem ({st.f_files} in all): no new file "
            "can be created, so no turn can start",
            f"remove files on that filesystem or grow it (`df -i {doc.layout.root}`)",
        )
