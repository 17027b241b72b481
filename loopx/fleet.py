"""What the supervisor and agents publish about themselves: ``supervisor.json``, ``agents/<id>.json``."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import Field

from loopx.model import Record, UtcDatetime


class AgentPhase(StrEnum):
    """What an agent is doing, as its heartbeat says."""

    STARTING = "starting"
    IDLE = "idle"  # nothing eligible; sleeping with jitter
    RUNNING = "running"  # a turn is in progress
    STOPPING = "stopping"


class AgentHeartbeat(Record):
    """``agents/<agent_id>.json``, rewritten atomically by the agent every few seconds."""

    schema_version: Literal[1] = 1
    agent_id: str
    pid: int
    pid_started_at: float  # psutil create_time(), to tell a reused pid apart
    hostname: str
    phase: AgentPhase
    goal_id: str | None = None
    turn_key: str | None = None
    turns_done: int = 0
    started_at: UtcDatetime
    beat_at: UtcDatetime


class AgentSlot(Record):
    """The supervisor's view of one agent slot."""

    index: int
    agent_id: str
    pid: int | None = None
    pid_started_at: float | None = None
    restarts: int = 0
    recent_restarts: int = 0  # restarts inside the crash-loop window
    crash_loop: bool = False
    last_exit: str | None = None  # e.g. "exit code 1", "signal SIGKILL"
    next_start_at: UtcDatetime | None = None


class FleetRecord(Record):
    """``supervisor.json``: the running (or last) supervisor and its agents."""

    schema_version: Literal[1] = 1
    pid: int
    pid_started_at: float
    hostname: str
    agents_wanted: int
    visible: str = "none"  # "none" | "tmux"
    backend: str = "local"  # "local" (processes) | "ray" (Ray actors)
    tmux_session: str | None = None
    state: str = "running"  # starting | running | stopping | stopped
    stop_grace_s: float = 30.0  # how long a stop waits for agents before SIGKILL
    until_idle: bool = False
    exit_code: int | None = None  # set when state is stopped
    started_at: UtcDatetime
    updated_at: UtcDatetime
    slots: list[AgentSlot] = Field(default_factory=list)

    @property
    def crash_loop(self) -> bool:
        """Whether any agent slot is in a crash loop."""
        return any(s.crash_loop for s in self.slots)
