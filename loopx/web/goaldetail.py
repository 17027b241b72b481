"""The dashboard's goal detail: the goal's view, its turns and a turn's run log, as typed documents."""

from __future__ import annotations

import contextlib
import os
from typing import Final, Literal

from pydantic import Field

from loopx.errors import LoopxError
from loopx.history.reader import newest_lines
from loopx.model import Record, UtcDatetime
from loopx.registry.goalrecords import Goal
from loopx.root import Layout
from loopx.state import GoalState, load_state
from loopx.status.view import (
    GoalStatusView,
)
from loopx.storage.files import open_regular
from loopx.turn.historyline import HistoryLine
from loopx.web.dashboard import AgentRow
from loopx.web.panels import WorktreePanel

TURNS_SHOWN: Final = 100


RUN_LOG_MAX_BYTES: Final = 256 * 1024


class TurnRow(Record):
    """One finished turn in a goal's history, newest first on the goal page."""

    seq: int
    turn_key: str
    status: str
    kind: str | None
    failure: str | None
    summary: str
    agent_id: str
    started_at: UtcDatetime
    ended_at: UtcDatetime
    wall_s: float
    cpu_s: float
    peak_rss_mb: float
    tokens: int
    cost_usd: float
    has_log: bool


class GoalDetail(Record):
    """``/api/goals/<id>``: policy, state, status view and the recent turns."""

    schema_version: Literal[1] = 1
    view: GoalStatusView
    goal: Goal | None = None  # None when the registry entry cannot be read
    state: GoalState | None = None
    state_error: str | None = None
    turns: list[TurnRow] = Field(default_factory=list)
    damaged_history_lines: int = 0
    actions: bool = False
    running: AgentRow | None = None  # the live agent running a turn of this goal now, if any
    worktree: WorktreePanel | None = None  # a --worktree goal's branch, folder and merge


class RunLog(Record):
    """``/api/goals/<id>/runs/<seq>``: the turn's markdown report."""

    schema_version: Literal[1] = 1
    goal_id: str
    seq: int
    markdown: str
    truncated: bool


def _turn_row(line: HistoryLine, runs: set[int]) -> TurnRow:
    u = line.usage
    return TurnRow(
        seq=line.seq,
        turn_key=line.turn_key,
        status=line.status,
        kind=line.kind.value if line.kind is not None else None,
        failure=line.failure,
        summary=line.summary,
        agent_id=line.agent_id,
        started_at=line.started_at,
        ended_at=line.ended_at,
        wall_s=u.wall_s,
        cpu_s=u.cpu_s,
        peak_rss_mb=u.peak_rss_mb,
        tokens=u.tokens,
        cost_usd=u.cost_usd,
        has_log=line.seq in runs,
    )


def _run_seqs(layout: Layout, goal_id: str) -> set[int]:
    try:
        names = os.listdir(layout.runs_dir(goal_id))
    except OSError:
        return set()
    return {int(n[:-3]) for n in names if n.endswith(".md") and n[:-3].isdigit()}


def goal_detail(
    layout: Layout,
    view: GoalStatusView,
    goal: Goal | None,
    *,
    actions: bool,
    worktree: WorktreePanel | None = None,
) -> GoalDetail:
    """Read one goal's state and newest turns (bounded) and build its page.

    ``worktree``: the goal's worktree panel, as the server's worktree states keep it.
    """
    state: GoalState | None = None
    state_error: str | None = None
    try:
        state = load_state(layout, view.goal_id)
    except (LoopxError, OSError) as e:
        state_error = str(e)
    runs = _run_seqs(layout, view.goal_id)
    turns: list[TurnRow] = []
    damaged = 0
    for line in newest_lines(layout.history_file(view.goal_id), TURNS_SHOWN):
        if isinstance(line, HistoryLine):
            turns.append(_turn_row(line, runs))
        else:
            damaged += 1
    return GoalDetail(
        view=view,
        goal=goal,
        state=state,
        state_error=state_error,
        turns=turns,
        damaged_history_lines=damaged,
        actions=actions,
        worktree=worktree,
    )


def latest_run_seq(layout: Layout, goal_id: str) -> int | None:
    """The newest turn of the goal that has a run log (one listing of ``runs/``), or None."""
    return max(_run_seqs(layout, goal_id), default=None)


def run_log(layout: Layout, goal_id: str, seq: int) -> RunLog | None:
    """The run log ``runs/<seq>.md`` (its first 256 KiB), or None when there is none."""
    path = layout.runs_dir(goal_id) / f"{seq}.md"
    with contextlib.suppress(FileNotFoundError):
        fd = open_regular(path)
        try:
            data = os.read(fd, RUN_LOG_MAX_BYTES + 1)
        finally:
            os.close(fd)
        return RunLog(
            goal_id=goal_id,
            seq=seq,
            markdown=data[:RUN_LOG_MAX_BYTES].decode("utf-8", errors="replace"),
            truncated=len(data) > RUN_LOG_MAX_BYTES,
        )
    return None
