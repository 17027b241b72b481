"""``--until-idle``: when the fleet has nothing left to do, and with which exit code.

The verdict is :func:`loopx.supervisor.idle.idle_verdict` over every goal's progress; this
check gathers it on the supervisor's cadence and answers only when two checks in a row
agree, so that a goal caught between two of an agent's file writes never ends the run.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from loopx.clock import calibrate
from loopx.log import get_logger
from loopx.model import utcnow
from loopx.root import Layout
from loopx.supervisor.config import SupervisorConfig
from loopx.supervisor.idle import idle_verdict
from loopx.supervisor.progress import goal_progress
from loopx.supervisor.slot import Slot

log = get_logger(__name__)


class IdleCheck:
    """The fleet's idle check, every ``config.idle_check_s`` seconds."""

    def __init__(self, layout: Layout, config: SupervisorConfig) -> None:
        self.layout = layout
        self.config = config
        self.next_at = 0.0  # monotonic time of the next check
        self._streak: int | None = None  # the exit code seen idle at the previous check

    def due(self, now: float) -> bool:
        """Whether a check is due at monotonic ``now`` (never without ``--until-idle``)."""
        return self.config.until_idle and now >= self.next_at

    def step(self, now: float, slots: Sequence[Slot]) -> int | None:
        """Check now; the exit code to stop with once idle twice in a row with it."""
        self.next_at = now + self.config.idle_check_s
        # The goals' next-eligible times are in the fleet's clock (agents calibrate theirs
        # against the files'); judged by this process's own clock, an hour behind, a goal
        # waiting 20 s looked an hour away and the run ended as blocked.
        calibrate(self.layout.agents_dir)
        wall = utcnow()
        live_slots = [s for s in slots if not s.retiring]
        verdict = idle_verdict(
            goal_progress(self.layout, now=wall),
            now=wall,
            horizon=timedelta(seconds=self.config.idle_horizon_s),
            fleet_dead=bool(live_slots) and all(s.crash_loop for s in live_slots),
        )
        if not verdict.idle:
            self._streak = None
            return None
        stop = self._streak == verdict.exit_code
        self._streak = verdict.exit_code
        if not stop:
            return None
        log.info(
            "fleet_idle",
            exit_code=verdict.exit_code,
            outcomes={k: str(v) for k, v in verdict.outcomes.items()},
        )
        return verdict.exit_code
