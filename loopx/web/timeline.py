"""``/api/timeline``: the last hour's turns per agent, one bar each from start to end.

The history lines are the true record of finished turns (agent, start, end,
outcome), and the status projection already holds each goal's newest one, so
only goals whose last turn ended inside the window are read, newest first, and
each is read backwards only until a line ends before the window. The work is
bounded whatever the fleet's size: at most :data:`MAX_GOALS` history files,
:data:`MAX_LINES_PER_GOAL` lines each, :data:`MAX_TURNS` bars in all (the
reply says when the bound cut it). Turns in flight come from the agents'
heartbeats, which name the turn and its start.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Final, Literal

from pydantic import Field

from loopx.errors import LoopxError
from loopx.history.reader import newest_lines
from loopx.model import Record, UtcDatetime
from loopx.root import Layout
from loopx.status.view import GoalStatusView
from loopx.turn.historyline import HistoryLine
from loopx.web.dashboard import AgentRow

WINDOW: Final = timedelta(hours=1)
MAX_GOALS: Final = 300  # history files read at most per answer
MAX_LINES_PER_GOAL: Final = 60  # a goal turning once a minute fills the hour
MAX_TURNS: Final = 2000  # bars in the reply at most


class TimelineTurn(Record):
    """One turn on an agent's row."""

    goal_id: str
    seq: int | None = None  # None: in flight (its sequence number is not known yet)
    turn_key: str
    status: Literal["committed", "failed", "stopped", "running"]
    kind: str | None = None  # a committed turn's result kind (progress, completed, ...)
    failure: str | None = None
    started_at: UtcDatetime
    ended_at: UtcDatetime | None = None  # None: running now


class TimelineAgent(Record):
    """An agent's turns in the window, oldest first."""

    agent_id: str
    alive: bool = False  # a fresh heartbeat
    turns: list[TimelineTurn] = Field(default_factory=list)


class Timeline(Record):
    """``/api/timeline``: every agent's turns of the last hour."""

    schema_version: Literal[1] = 1
    start: UtcDatetime
    end: UtcDatetime  # the server's now, which the bars are placed against
    agents: list[TimelineAgent]
    turns: int
    goals_read: int
    truncated: bool = False  # a bound cut the reply: older turns in the window are left out


def recent_goals(goals: Sequence[GoalStatusView], start: datetime) -> list[tuple[str, str]]:
    """The goals whose newest turn ended at or after ``start``, newest first, with its key. Pure."""
    recent = [
        (g.last_turn.ended_at, g.goal_id, g.last_turn.turn_key)
        for g in goals
        if g.last_turn is not None and g.last_turn.ended_at >= start
    ]
    recent.sort(reverse=True)
    return [(goal_id, key) for _, goal_id, key in recent]


def _turn(line: HistoryLine) -> TimelineTurn:
    return TimelineTurn(
        goal_id=line.goal_id,
        seq=line.seq,
        turn_key=line.turn_key,
        status=str(line.status),  # a TurnStatus: committed, failed or stopped
        kind=str(line.kind) if line.kind is not None else None,
        failure=str(line.failure) if line.failure is not None else None,
        started_at=line.started_at,
        ended_at=line.ended_at,
    )


class TurnReader:
    """Reads the window's history lines, re-reading a goal only when its newest turn changed.

    Each goal's lines are kept with the key of the newest turn they were read at
    (the projection's ``last_turn``), so a refresh costs the goals that turned
    since, not every busy goal again. Safe to share between request threads.
    """

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self._kept: dict[str, tuple[str, list[HistoryLine], bool]] = {}
        self._lock = threading.Lock()

    def read(
        self, goals: Sequence[tuple[str, str]], start: datetime
    ) -> tuple[list[HistoryLine], bool]:
        """The lines of ``goals`` (id, newest turn key) ending at or after ``start``, bounded.

        Returns the lines and whether a bound cut them.
        """
        lines: list[HistoryLine] = []
        truncated = len(goals) > MAX_GOALS
        kept: dict[str, tuple[str, list[HistoryLine], bool]] = {}
        for goal_id, newest in goals[:MAX_GOALS]:
            with self._lock:
                entry = self._kept.get(goal_id)
            if entry is None or entry[0] != newest:
                entry = (newest, *self._read_goal(goal_id, start))
            kept[goal_id] = entry
            lines.extend(line for line in entry[1] if line.ended_at >= start)
            truncated = truncated or entry[2]
        with self._lock:
            self._kept = kept  # goals that left the window are forgotten
        if len(lines) > MAX_TURNS:
            lines.sort(key=lambda x: x.ended_at, reverse=True)
            lines, truncated = lines[:MAX_TURNS], True
        return lines, truncated

    def _read_goal(self, goal_id: str, start: datetime) -> tuple[list[HistoryLine], bool]:
        found: list[HistoryLine] = []
        with contextlib.suppress(LoopxError, OSError):
            for line in newest_lines(self.layout.history_file(goal_id), MAX_LINES_PER_GOAL):
                if not isinstance(line, HistoryLine):
                    continue  # a damaged line: the goal page shows it
                if line.ended_at < start:
                    break
                found.append(line)
        return found, len(found) >= MAX_LINES_PER_GOAL


def timeline(
    lines: Sequence[HistoryLine],
    agents: Sequence[AgentRow],
    *,
    now: datetime,
    goals_read: int,
    truncated: bool,
) -> Timeline:
    """Group finished turns and the turns in flight by agent, fleet slots first. Pure."""
    start = now - WINDOW
    rows: dict[str, TimelineAgent] = {
        a.agent_id: TimelineAgent(agent_id=a.agent_id, alive=a.alive) for a in agents
    }
    by_agent: dict[str, list[TimelineTurn]] = {}
    for line in lines:
        by_agent.setdefault(line.agent_id, []).append(_turn(line))
    finished = {line.turn_key for line in lines}
    for a in agents:
        if (
            a.alive
            and a.goal_id
            and a.turn_key
            and a.turn_since is not None
            and (
                a.turn_key not in finished  # a heartbeat a moment behind the turn's end
            )
        ):
            running = TimelineTurn(
                goal_id=a.goal_id,
                turn_key=a.turn_key,
                status="running",
                started_at=max(a.turn_since, start),
            )
            by_agent.setdefault(a.agent_id, []).append(running)
    for agent_id in sorted(by_agent.keys() - rows.keys()):
        rows[agent_id] = TimelineAgent(agent_id=agent_id)
    out = [
        row.model_copy(
            update={"turns": sorted(by_agent.get(row.agent_id, []), key=lambda t: t.started_at)}
        )
        for row in rows.values()
    ]
    return Timeline(
        start=start,
        end=now,
        agents=out,
        turns=sum(len(r.turns) for r in out),
        goals_read=goals_read,
        truncated=truncated,
    )
