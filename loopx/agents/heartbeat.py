"""An agent's heartbeat: ``agents/<id>.json``, what it does now, and why writes are refused.

The supervisor and ``loopx status`` read it: the agent's phase, the goal
and the turn it works on (and since when), its turn count, and whether it
is degraded. It is rewritten atomically, not fsynced: a heartbeat tells live
processes about a live agent, and after a power cut there is no agent left
for it to describe. A write the disk refuses is a missed beat, remembered
as ``degraded`` until one passes.
"""

from __future__ import annotations

import socket
import threading
from datetime import datetime

from loopx.errors import resource_fault
from loopx.fleet import AgentConfig, AgentHeartbeat, AgentPhase
from loopx.log import get_logger
from loopx.model import utcnow
from loopx.process import ProcessIdentity
from loopx.root import Layout
from loopx.storage.duties import Duties
from loopx.storage.files import atomic_write_model

log = get_logger(__name__)


class Heartbeat:
    """What the agent publishes about itself, and its writer."""

    def __init__(self, layout: Layout, agent_id: str, duties: Duties) -> None:
        self.layout = layout
        self.agent_id = agent_id
        self.duties = duties  # a failing duty shows as degraded too
        self.turns_done = 0
        self.degraded: str | None = None  # why writes are refused now (disk full...), if they are
        self._me = ProcessIdentity.current()
        self._started_at = utcnow()
        self._hostname = socket.gethostname()
        self._lock = threading.Lock()
        self._phase = AgentPhase.STARTING
        self._goal_id: str | None = None
        self._turn_key: str | None = None
        self._turn_started_at: datetime | None = None

    def beat(self, phase: AgentPhase | None = None, *, goal_id: str | None = None) -> None:
        """Rewrite ``agents/<id>.json`` atomically (optionally changing the phase first)."""
        with self._lock:
            if phase is not None:
                self._change(phase, goal_id)
            record = AgentHeartbeat(
                agent_id=self.agent_id,
                pid=self._me.pid,
                pid_started_at=self._me.started_at,
                hostname=self._hostname,
                phase=self._phase,
                goal_id=self._goal_id,
                turn_key=self._turn_key,
                turn_started_at=self._turn_started_at,
                turns_done=self.turns_done,
                started_at=self._started_at,
                beat_at=utcnow(),
                degraded=self.degraded_reason,
            )
            try:
                atomic_write_model(self.layout.agent_file(self.agent_id), record, durable=False)
            except OSError as e:
                self.note_fault(e)  # a missed beat; the next one may pass
                return
            self.note_fault(None)

    def note_fault(self, error: OSError | None) -> None:
        """Track whether writes are refused now; raise errors that are not resource faults."""
        reason = resource_fault(error) if error is not None else None
        if error is not None and reason is None:
            raise error
        if reason != self.degraded:
            if reason is not None:
                log.warning("agent_degraded", reason=reason)
            else:
                log.info("agent_recovered", was=self.degraded)
            self.degraded = reason

    @property
    def degraded_reason(self) -> str | None:
        """Why the agent is degraded now: refused writes, then failing duties."""
        parts = [p for p in (self.degraded, self.duties.reason) if p]
        return "; ".join(parts) or None

    def set_phase(self, phase: AgentPhase, goal_id: str | None = None) -> None:
        """Change the phase the next beat publishes, without writing now."""
        with self._lock:
            self._change(phase, goal_id)

    def on_turn(self, turn_key: str, started_at: datetime) -> None:
        """The turn ``turn_key`` began (its journal exists): publish it in a heartbeat now."""
        with self._lock:
            self._turn_key = turn_key
            self._turn_started_at = started_at
        self.beat()

    def _change(self, phase: AgentPhase, goal_id: str | None) -> None:
        self._phase = phase
        self._goal_id = goal_id
        self._turn_key = None
        self._turn_started_at = None


def parent_of(config: AgentConfig) -> ProcessIdentity | None:
    """The process the agent watches (``parent_pid``); None when it is gone already.

    Given only a pid, the process holding that pid now.
    """
    if config.parent_pid is None:
        return None
    if config.parent_started_at is None:
        return ProcessIdentity.of(config.parent_pid)
    return ProcessIdentity(config.parent_pid, config.parent_started_at)
