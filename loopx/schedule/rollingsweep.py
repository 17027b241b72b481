"""A round-robin pass over the goals spread over time: the scheduling index's sweeps.

The index (:mod:`loopx.schedule.index`) stat-checks every goal directory once
per sweep and compares every goal's file fingerprints once per deep sweep; a
:class:`RollingSweep` spreads each pass so that no step pays for every goal.
"""

from __future__ import annotations

from typing import Final

# The sweeps' pace past 12,000 goals: at most this many goals a second (a stat; a fingerprint).
SWEEP_RATE: Final = 200.0
DEEP_SWEEP_RATE: Final = 20.0
SWEEP_CHUNK: Final = (
    1000  # goals a step takes from one sweep at most (an idle agent wakes for them)
)


class RollingSweep:
    """A round-robin pass over the goals spread over time: every goal once per period.

    The period is ``period_s``, or ``len(goals) / rate`` seconds when that is
    longer, so the pass costs at most ``rate`` goals a second of time passed
    however many goals there are. :meth:`take` returns the goals whose turn
    came since the last call (at most ``chunk``; a step that lags catches up
    in the next ones); :meth:`next_at` says when the next chunk is due.
    """

    def __init__(self, period_s: float, rate: float, *, chunk: int = SWEEP_CHUNK) -> None:
        self.period_s, self.rate, self.chunk = period_s, rate, chunk
        self.at = 0.0  # POSIX seconds: the pass has covered its goals' turns up to here
        self._pos = 0

    def period(self, goals: int) -> float:
        """Seconds for one pass over ``goals`` goals."""
        return max(self.period_s, goals / self.rate)

    def restart(self, ts: float) -> None:
        """Every goal was just looked at: the next pass starts at ``ts``."""
        self.at = ts

    def take(self, order: list[str], ts: float) -> list[str]:
        """The goals of ``order`` (round-robin) whose turn came between the last call and ``ts``."""
        n = len(order)
        if n == 0:
            self.at = ts
            return []
        per_goal = self.period(n) / n
        count = min(n, self.chunk, int((ts - self.at) / per_goal))
        if count <= 0:
            return []
        self.at = ts if count == n else self.at + count * per_goal
        start = self._pos % n
        picked = order[start : start + count]
        picked += order[: count - len(picked)]
        self._pos = (start + count) % n
        return picked

    def next_at(self, goals: int) -> float:
        """POSIX seconds when the next chunk of the pass is due."""
        n = max(goals, 1)
        return self.at + self.period(n) / n * min(n, self.chunk)
