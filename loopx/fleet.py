"""The contract between the supervisor and its agents.

What they publish about themselves (``supervisor.json``, ``agents/<id>.json``),
how an agent is configured (:class:`AgentConfig`), and what an agent loop
offers a back-end that runs it inside its own process (:class:`AgentLoop`,
the Ray actor). The supervisor starts local agents as ``python -m
loopx.agents``; it never imports :mod:`loopx.agents`, and agents never import
:mod:`loopx.supervisor`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Literal, Protocol

from pydantic import Field

from loopx.model import Record, UtcDatetime
from loopx.root import Layout


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


@dataclass(frozen=True, slots=True)
class AgentConfig:
    """How one agent runs.

    Attributes:
        agent_id: this agent's id (a safe path segment), also its heartbeat file name.
        max_turns: exit 0 after this many turns ran (None: no limit).
        once: one step, then exit.
        heartbeat_s: how often the heartbeat file is rewritten.
        idle_min_s / idle_max_s: the idle sleep starts at min and doubles to max (with jitter).
        parent_pid / parent_started_at: stop when this process (the supervisor) is gone;
            covers tmux windows, whose parent is the tmux server, where the
            parent-death signal cannot help.
        resources: run only goals whose ``resources`` this agent holds (None: all).

    """

    agent_id: str
    max_turns: int | None = None
    once: bool = False
    heartbeat_s: float = 2.0
    idle_min_s: float = 0.05
    idle_max_s: float = 2.0
    parent_pid: int | None = None
    parent_started_at: float | None = None
    # Only goals whose `resources` this agent holds (a Ray actor's custom resources);
    # None: every goal (the local back-end, where resources do not apply).
    resources: Mapping[str, float] | None = None


class AgentLoop(Protocol):
    """An agent's loop as a back-end drives it in-process (:class:`loopx.agents.loop.Agent`)."""

    turns_done: int

    def run(self) -> int:
        """Loop until stopped; the exit code."""

    def request_stop(self) -> None:
        """Stop at the next safe point."""


# What makes an agent loop: ``loopx.agents.loop.Agent``, handed to the supervisor by
# the composition root (the CLI), so the supervisor need not import loopx.agents.
AgentLoopFactory = Callable[[Layout, AgentConfig], AgentLoop]
