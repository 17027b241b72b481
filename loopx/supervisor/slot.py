"""One agent slot of the fleet: which agent holds it and how often it was restarted."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import timedelta

from loopx import process
from loopx.fleet import AgentSlot, ExitStatus
from loopx.model import utcnow
from loopx.supervisor.runner import AgentHandle


@dataclass(slots=True)
class Slot:
    """One agent slot: its current agent, restart history and crash-loop state."""

    index: int
    agent_id: str
    agent: AgentHandle | None = None
    spawned_at: float = 0.0
    next_start: float | None = 0.0  # monotonic; None: do not start (retiring or stopping)
    restart_times: list[float] = field(default_factory=list)
    restarts: int = 0
    recent_restarts: int = 0
    crash_loop: bool = False
    last_exit: ExitStatus | None = None
    retiring: bool = False

    @property
    def ref(self) -> process.ProcessIdentity | None:
        """The slot's agent process, once known."""
        return self.agent.ref if self.agent is not None else None

    def record(self) -> AgentSlot:
        """The slot as ``supervisor.json`` shows it."""
        ref = self.ref
        return AgentSlot(
            index=self.index,
            agent_id=self.agent_id,
            pid=ref.pid if ref else None,
            pid_started_at=ref.started_at if ref else None,
            ray=self.agent.placement if self.agent is not None and ref else None,
            restarts=self.restarts,
            recent_restarts=self.recent_restarts,
            crash_loop=self.crash_loop,
            last_exit=self.last_exit,
            next_start_at=None
            if self.next_start is None or self.agent is not None
            else utcnow() + timedelta(seconds=max(0.0, self.next_start - time.monotonic())),
        )


def resize(slots: list[Slot], wanted: int, *, now: float) -> list[Slot]:
    """Make ``wanted`` slots not retiring: retire the highest, or add at the lowest free index.

    Changes ``slots`` in place (kept sorted by index); a new slot starts at
    ``now``. Returns the slots it retired, whose agents are to be asked to stop.
    """
    active = [s for s in slots if not s.retiring]
    retired = active[wanted:]
    for slot in retired:
        slot.retiring = True
        slot.next_start = None
    used = {s.index for s in slots}
    index = 1
    for _ in range(wanted - len(active)):
        while index in used:
            index += 1
        used.add(index)
        slots.append(Slot(index, f"agent-{index}", next_start=now))
    slots.sort(key=lambda s: s.index)
    return retired
