"""``root.quota``: `loopx quota show|should-run`."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from loopx.model import current_offset, utcnow
from loopx.quota import decision as rules
from loopx.quota.decision import QuotaDecision
from loopx.quota.quotareport import QuotaReport, quota_report
from loopx.quota.snapshot import fingerprints, store_snapshot
from loopx.registry.goals import get_goal
from loopx.root import Layout
from loopx.turn.lease import read_lease


@dataclass(frozen=True, slots=True)
class Quota:
    """Quota of one root's goals."""

    layout: Layout

    def _lease_until(self, goal_id: str, now: datetime) -> datetime | None:
        """When the lease that keeps other turns away runs out; None when none does."""
        # A lease past its expiry no longer keeps other agents away (it may be taken over).
        lease = read_lease(self.layout, goal_id)
        return lease.expires_at if lease is not None and lease.expires_at > now else None

    def report(self, goal_id: str, *, now: datetime | None = None) -> QuotaReport:
        """`loopx quota show`: policy, window spend, what is left, and the decision.

        Raises:
            GoalNotFoundError: no such goal.
            CorruptFileError: the goal's state or a ledger line is damaged.
        """
        goal = get_goal(self.layout, goal_id)
        at = now or utcnow()
        leased = self._lease_until(goal.id, at) is not None
        return quota_report(self.layout, goal, now=at, leased=leased)

    def should_run(self, goal_id: str, *, now: datetime | None = None) -> QuotaDecision:
        """`loopx quota should-run`: may the goal run a turn now (``.allowed``), and why.

        Decided on the real clock (no ``now``), the decision is also stored for
        the warm `loopx quota should-run` (:mod:`loopx.quota.warmanswer`).

        Raises:
            GoalNotFoundError: no such goal.
            CorruptFileError: the goal's state or a ledger line is damaged.
        """
        real_clock = now is None and current_offset() == timedelta(0)
        before = fingerprints(self.layout, goal_id) if real_clock else None
        goal = get_goal(self.layout, goal_id)
        at = now or utcnow()
        lease_until = self._lease_until(goal.id, at)
        inputs = rules.gather_inputs(self.layout, goal, now=at)
        decision = rules.should_run(goal, *inputs, leased=lease_until is not None, now=at)
        if before is not None:
            until = rules.holds_until(goal, inputs, lease_expires_at=lease_until, now=at)
            store_snapshot(self.layout, goal, decision, before=before, valid_until=until)
        return decision
