"""The supervisor's gc duty: ``loopx gc`` a bounded amount at a time, when agents have time.

Every ``interval_s`` the duty folds the next few goals (a cursor walks the
root's goals in order), but only while some agent is idle, so gc never takes
a turn's place. When the root's disk limits hold new turns back it runs at
once, on every goal, within a larger time budget. Leased goals are skipped by
gc itself; a skipped goal comes round again.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from datetime import datetime
from typing import Final

from loopx.errors import LoopxError
from loopx.fleet import AgentHeartbeat, AgentPhase
from loopx.log import get_logger
from loopx.retention.gc import collect_goal, goal_ids
from loopx.retention.policy import load_settings
from loopx.retention.space import check_space, current_reading
from loopx.root import Layout
from loopx.storage.files import read_model_or_none

log = get_logger(__name__)

GC_INTERVAL_S: Final = 30.0
GOALS_PER_STEP: Final = 25
STEP_BUDGET_S: Final = 1.0  # one step's wall time, at most (checked between goals)
URGENT_BUDGET_S: Final = 10.0  # while the disk limits hold turns back


class GcDuty:
    """Where the duty is in the root's goals, and when it runs next."""

    def __init__(self, layout: Layout, *, interval_s: float = GC_INTERVAL_S) -> None:
        self.layout = layout
        self.interval_s = interval_s
        self.next_at = 0.0  # monotonic
        self._cursor = ""  # the last goal id visited

    def due(self, now: float) -> bool:
        """Whether a step is due at monotonic time ``now``."""
        return now >= self.next_at

    def step(self, now: float, *, wall: datetime, agents: Iterable[str]) -> int:
        """One step: fold the next goals if an agent is idle (all of them if space is short).

        Returns the number of turns folded. Errors of one goal are logged and the
        duty goes on; the supervisor must never stop for gc.
        """
        self.next_at = now + self.interval_s
        try:
            short = check_space(self.layout, now=wall)
            if short is None and not self._someone_idle(agents):
                return 0
            return self._fold(
                wall, budget_s=URGENT_BUDGET_S if short else STEP_BUDGET_S, every=short is not None
            )
        except (LoopxError, OSError) as e:
            log.warning("gc_step_failed", error=str(e))
            return 0

    def _someone_idle(self, agents: Iterable[str]) -> bool:
        for agent_id in agents:
            try:
                beat = read_model_or_none(self.layout.agent_file(agent_id), AgentHeartbeat)
            except (LoopxError, OSError):
                continue
            if beat is not None and beat.phase is AgentPhase.IDLE:
                return True
        return False

    def _fold(self, wall: datetime, *, budget_s: float, every: bool) -> int:
        started = time.monotonic()
        settings = load_settings(self.layout)
        ids = goal_ids(self.layout)
        start = next((i for i, g in enumerate(ids) if g > self._cursor), 0)
        order = ids[start:] + ids[:start]
        folded = 0
        for count, goal_id in enumerate(order):
            if (not every and count >= GOALS_PER_STEP) or time.monotonic() - started > budget_s:
                break
            self._cursor = goal_id
            try:
                folded += collect_goal(self.layout, goal_id, settings, now=wall).folded
            except (LoopxError, OSError) as e:
                log.warning("gc_goal_failed", goal_id=goal_id, error=str(e))
        if settings.max_root_mb is not None:
            current_reading(self.layout, now=wall, max_age_s=0.0)  # measure after removing
        return folded


__all__ = ["GC_INTERVAL_S", "GcDuty"]
