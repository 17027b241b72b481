"""``loopx doctor``'s reliability checks: live processes of finished turns, future-dated entries."""

from __future__ import annotations

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
            "ahead of this clock: the goal waits longer than its result asked",
            "loopx doctor --repair  (shifts the state's times back to now)",
            goal_id,
        )
    ahead = [r for r in ledger or [] if isinstance(r, SpendRecord) and r.ended_at > limit]
    if ahead:
        doc.add(
            Severity.WARNING,
            FindingCode.FUTURE_DATED,
            doc.layout.quota_file(goal_id),
            f"{len(ahead)} spend record(s) dated ahead of this clock (newest "
            f"{max(r.ended_at for r in ahead).isoformat()}): they stay in the quota "
            "window that much longer",
            "check the clocks of the machines running agents; the records leave the "
            "window at their own dates",
            goal_id,
        )
