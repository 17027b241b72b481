"""``root.quota``: `loopx quota show|should-run`."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from loopx.model import utcnow
from loopx.quota.decision import QuotaDecision, QuotaReport, decide, quota_report
from loopx.registry.goals import get_goal
from loopx.root import Layout
from loopx.turn.lease import read_lease


@dataclass(frozen=True, slots=True)
class Quota:
    """Quota of one root's goals."""

    layout: Layout

    def _leased(self, goal_id: str, now: datetime) -> bool:
        # A lease past its expiry no longer keeps other agents away (it may be taken over).
        lease = read_lease(self.layout, goal_id)
        return lease is not None and lease.expires_at > now

    def report(self, goal_id: str, *, now: datetime | None = None) -> QuotaReport:
        """`loopx quota show`: policy, window spend, what is left, and the decision.

        Raises:
            GoalNotFoundError: no such goal.
            CorruptFileError: the goal's state or a ledger line is damaged.
        """
        goal = get_goal(self.layout, goal_id)
        at = now or utcnow()
        return quota_report(self.layout, goal, now=at, leased=self._leased(goal.id, at))

    def should_run(self, goal_id: str, *, now: datetime | None = None) -> QuotaDecision:
        """`loopx quota should-run`: may the goal run a turn now (``.allowed``), and why.

        Raises:
            GoalNotFoundError: no such goal.
            CorruptFileError: the goal's state or a ledger line is damaged.
        """
        goal = get_goal(self.layout, goal_id)
        at = now or utcnow()
        return decide(self.layout, goal, now=at, leased=self._leased(goal.id, at))
