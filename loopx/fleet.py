"""The contract between the supervisor and its agents.

What they publish about themselves (``supervisor.json``, ``agents/<id>.json``),
how an agent is configured (:class:`AgentConfig`), and what an agent loop
offers a back-end that runs it inside its own process (:class:`AgentLoop`,
the Ray actor). The supervisor starts local agents as ``python -m
loopx.agents``; it never imports :mod:`loopx.agents`, and agents never import
:mod:`loopx.supervisor`.

The supervisor's outputs are here too (`loopx supervisor status|start|stop|scale
--json`: :class:`SupervisorStatus`, :class:`SupervisorStarted`,
:class:`SupervisorStopped`, :class:`ScaleResult`), and :class:`ExitStatus`, how
an agent ended, so that `loopx schema` lists them from the kernel.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Final, Literal, Protocol, Self

from pydantic import Field, field_validator

from loopx.model import Record, UtcDatetime
from loopx.process import ProcessIdentity
from loopx.root import Layout


class AgentPhase(StrEnum):
    """What an agent is doing, as its heartbeat says."""

    STARTING = "starting"
    IDLE = "idle"  # nothing eligible; sleeping with jitter
    RUNNING = "running"  # a turn is in progress
    STOPPING = "stopping"


MAX_AGENTS: Final = 256  # the most agents `supervisor scale` accepts


class FleetState(StrEnum):
    """Where a supervisor is in its life (``supervisor.json``'s ``state``)."""

    STARTING = "starting"  # taking the lock, reaping leftovers, recovering
    RUNNING = "running"
    STOPPING = "stopping"  # a stop was requested; agents are finishing their turns
    STOPPED = "stopped"  # the supervisor exited; ``exit_code`` is set
    # Never written by a supervisor: status's word for a record that says starting,
    # running or stopping while its process (pid and start time) is gone.
    DEAD = "dead"


class Visibility(StrEnum):
    """Where agents' output goes (``--visible``)."""

    NONE = "none"  # headless: logs/agent-<n>.log
    TMUX = "tmux"  # one tmux window per agent


class Backend(StrEnum):
    """Where agents run (``--backend``)."""

    LOCAL = "local"  # processes on this machine
    RAY = "ray"  # Ray actors


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
    turn_started_at: UtcDatetime | None = None  # when the turn ``turn_key`` started (its journal)
    turns_done: int = 0
    started_at: UtcDatetime
    beat_at: UtcDatetime
    # What a resource error stops now (refused writes, a failing step), if anything.
    degraded: str | None = None


class ExitKind(StrEnum):
    """How an agent ended."""

    EXITED = "exited"  # it exited by itself with ``code``
    SIGNALLED = "signalled"  # a signal (``signal``) ended it
    STALLED = "stalled"  # the supervisor killed it: its heartbeat went silent
    KILLED = "killed"  # its back-end killed it (``ray.kill``)
    DIED = "died"  # its Ray worker died under it (killed, OOM, node lost)
    FAILED = "failed"  # its Ray actor raised; ``detail`` says what
    UNKNOWN = "unknown"  # not our child: it is gone, but its status was not observed


class ExitStatus(Record):
    """How an agent ended; the supervisor restarts a clean exit without counting a crash."""

    kind: ExitKind
    code: int | None = None  # the exit code, for ``exited``
    signal: str | None = None  # the signal's name (``SIGKILL``), for ``signalled``
    detail: str = ""  # what the back-end or the supervisor said about it

    @classmethod
    def of_returncode(cls, returncode: int | None) -> Self:
        """A child's status from ``Popen.returncode`` (negative: the signal), None if unseen."""
        if returncode is None:
            return cls(kind=ExitKind.UNKNOWN)
        if returncode < 0:
            try:
                name = signal.Signals(-returncode).name
            except ValueError:
                name = str(-returncode)
            return cls(kind=ExitKind.SIGNALLED, signal=name)
        return cls(kind=ExitKind.EXITED, code=returncode)

    @property
    def clean(self) -> bool:
        """Whether the agent exited 0 by itself (asked to, or done); anything else is a crash."""
        return self.kind is ExitKind.EXITED and self.code == 0

    def describe(self) -> str:
        """In words: ``exit code 1``, ``signal SIGKILL``, ``killed: heartbeat silent for 61s``."""
        if self.kind is ExitKind.EXITED:
            return f"exit code {self.code}"
        if self.kind is ExitKind.SIGNALLED:
            return f"signal {self.signal}"
        if self.kind is ExitKind.UNKNOWN:
            return "exited (status unknown: not a child of this supervisor)"
        return f"{self.kind}: {self.detail}" if self.detail else str(self.kind)


class RayPlacement(Record):
    """Where Ray placed an agent's actor: its node and actor ids (``--backend ray`` only)."""

    node_id: str
    node_ip: str
    hostname: str  # the node's hostname, as the actor's worker saw it
    actor_id: str


class AgentSlot(Record):
    """The supervisor's view of one agent slot."""

    index: int
    agent_id: str
    pid: int | None = None  # on the agent's node (a Ray actor's node may be another machine)
    pid_started_at: float | None = None
    ray: RayPlacement | None = None  # the live actor's node, for a Ray fleet
    restarts: int = 0
    recent_restarts: int = 0  # restarts inside the crash-loop window
    crash_loop: bool = False
    last_exit: ExitStatus | None = None
    next_start_at: UtcDatetime | None = None

    @field_validator("last_exit", mode="before")
    @classmethod
    def _from_text(cls, value: object) -> object:
        # supervisor.json written before last_exit was typed held the words; keep it readable.
        return ExitStatus(kind=ExitKind.UNKNOWN, detail=value) if isinstance(value, str) else value


class FleetRecord(Record):
    """``supervisor.json``: the running (or last) supervisor and its agents."""

    schema_version: Literal[1] = 1
    pid: int
    pid_started_at: float
    hostname: str
    agents_wanted: int
    visible: Visibility = Visibility.NONE
    backend: Backend = Backend.LOCAL
    tmux_session: str | None = None
    state: FleetState = FleetState.RUNNING
    stop_grace_s: float = 30.0  # how long a stop waits for agents before SIGKILL
    until_idle: bool = False
    exit_code: int | None = None  # set when state is stopped
    started_at: UtcDatetime
    updated_at: UtcDatetime
    slots: list[AgentSlot] = Field(default_factory=list)
    # Its duties a resource error stops now ("refresh: too many open files"), if any.
    degraded: str | None = None

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


class ScaleRequest(Record):
    """``supervisor.scale.json``: how many agents a person wants (read on SIGHUP)."""

    schema_version: Literal[1] = 1
    agents: Annotated[int, Field(ge=0, le=MAX_AGENTS)]
    requested_at: UtcDatetime


class LivenessCheck(StrEnum):
    """How ``supervisor status`` and ``status`` decided whether an agent is alive."""

    PROCESS = "process"  # its pid and start time, looked up on this machine
    RAY = "ray"  # the running Ray supervisor holds its actor (on whichever node)


class AgentView(AgentHeartbeat):
    """An agent's heartbeat, with whether it is alive (and how that was decided) and the beat's age."""

    alive: bool
    beat_age_s: float
    checked_by: LivenessCheck = LivenessCheck.PROCESS
    ray: RayPlacement | None = None  # the actor's node, when a Ray supervisor holds it


class SupervisorStatus(Record):
    """`loopx supervisor status --json`."""

    schema_version: Literal[1] = 1
    root: str
    running: bool  # the recorded supervisor's pid and start time match a live process
    crash_loop: bool  # a running supervisor has a slot in a crash loop
    supervisor: FleetRecord | None  # None when no supervisor ever ran on this root
    agents: list[AgentView]


class SupervisorStarted(Record):
    """`loopx supervisor start --json`: the detached supervisor once it reported running."""

    schema_version: Literal[1] = 1
    started: Literal[True] = True
    supervisor: FleetRecord


class SupervisorStopped(Record):
    """`loopx supervisor stop --json`: the final record, None when none was running."""

    schema_version: Literal[1] = 1
    was_running: bool
    supervisor: FleetRecord | None


class ScaleResult(Record):
    """`loopx supervisor scale N --json`: the count asked for, and whether a supervisor got it."""

    schema_version: Literal[1] = 1
    agents: int
    signalled: bool  # False: none runs; the next start's --agents decides
    supervisor_pid: int | None = None  # the supervisor that got SIGHUP


ACTIVE_STATES = frozenset({FleetState.STARTING, FleetState.RUNNING, FleetState.STOPPING})


def process_runs(pid: int, started_at: float) -> bool:
    """Whether ``pid`` still runs the process started at ``started_at`` (a zombie does not)."""
    return ProcessIdentity(pid, started_at).alive()


def ray_fleet(record: FleetRecord | None, *, supervisor_running: bool) -> FleetRecord | None:
    """The record, if it is a running Ray supervisor's: the one that can vouch for its agents. Pure."""
    if (
        record is None
        or not supervisor_running
        or record.backend is not Backend.RAY
        or record.state not in ACTIVE_STATES
    ):
        return None
    return record


def ray_slot_of(fleet: FleetRecord, beat: AgentHeartbeat) -> AgentSlot | None:
    """The slot whose live actor wrote ``beat`` (same agent, pid and start time), if any. Pure.

    A Ray agent may run on another machine, where its pid means nothing here;
    the supervisor knows its actors through Ray (a dead node's actors fail
    their calls, and the slot is emptied), so a slot that still names the
    beat's process is what makes that agent alive.
    """
    for slot in fleet.slots:
        if (
            slot.ray is not None
            and slot.agent_id == beat.agent_id
            and slot.pid == beat.pid
            and slot.pid_started_at == beat.pid_started_at
        ):
            return slot
    return None


def died(record: FleetRecord, *, hostname: str) -> bool:
    """Whether the record names an active supervisor on this host whose process is gone."""
    return (
        record.state in ACTIVE_STATES
        and record.hostname == hostname
        and not process_runs(record.pid, record.pid_started_at)
    )
