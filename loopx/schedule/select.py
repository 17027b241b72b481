"""Select: which goal an agent should work on next. Pure: candidates and ``now`` in, a ranking out.

A goal is eligible when its registry status is active, no gate waits for a
human, no live holder leases it, no other goal's live turn holds its workdir
(it waits to be woken by that turn's release, not claimed again on a timer),
its quota allows a turn and its ``next_eligible_at`` has passed. Eligible goals are ranked by priority
(higher first), then by weighted fair share: the wall time the goal spent in
its quota window divided by its compute share, lowest first, so that on a busy
fleet goals of shares 0.6 / 0.3 / 0.1 receive time in those proportions (the
same rule as a stride or weighted-fair-queueing scheduler). Ties go by id, so
every agent computes the same order from the same files.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from loopx.registry.goalrecords import Goal, GoalStatus


class Ineligible(StrEnum):
    """Why a candidate is not eligible now (None in :func:`why_ineligible` means eligible)."""

    NOT_ACTIVE = "not_active"
    GATE_PENDING = "gate_pending"
    LEASED = "leased"
    WORKDIR_BUSY = "workdir_busy"
    QUOTA = "quota"
    NOT_YET_ELIGIBLE = "not_yet_eligible"


@dataclass(frozen=True, slots=True)
class Candidate:
    """What select knows about one goal, gathered by the caller from the root.

    Attributes:
        goal: the goal's registry policy (status, priority, compute share).
        open_gates: how many gates wait for a human.
        next_eligible_at: no turn before this time (state's scheduler field), or None.
        leased_until: expiry of a lease held by a live holder, or None when unleased.
        workdir_busy_until: the goal waits for another goal's live turn in its workdir,
            woken by that turn's release; looked at again by this time at the latest
            (the holder's lease expiry and grace). None: it does not wait.
        quota_allowed: what the quota decision said for a turn now.
        spent_wall_s: host wall seconds spent in the goal's current quota window.

    """

    goal: Goal
    open_gates: int = 0
    next_eligible_at: datetime | None = None
    leased_until: datetime | None = None
    workdir_busy_until: datetime | None = None
    quota_allowed: bool = True
    spent_wall_s: float = 0.0

    @property
    def goal_id(self) -> str:
        """The goal's id."""
        return self.goal.id


def _after(at: datetime | None, now: datetime) -> bool:
    return at is not None and at > now


def why_ineligible(candidate: Candidate, *, now: datetime) -> Ineligible | None:
    """Why ``candidate`` may not run a turn at ``now``; None when it may (first reason wins)."""
    goal = candidate.goal
    reasons = (
        (goal.status is not GoalStatus.ACTIVE, Ineligible.NOT_ACTIVE),
        (candidate.open_gates > 0, Ineligible.GATE_PENDING),
        (_after(candidate.leased_until, now), Ineligible.LEASED),
        (_after(candidate.workdir_busy_until, now), Ineligible.WORKDIR_BUSY),
        (not candidate.quota_allowed or goal.quota.compute <= 0, Ineligible.QUOTA),
        (_after(candidate.next_eligible_at, now), Ineligible.NOT_YET_ELIGIBLE),
    )
    return next((why for applies, why in reasons if applies), None)


def wake_at(
    candidate: Candidate,
    *,
    now: datetime,
    quota_next: datetime | None,
    host_recheck_s: float = 5.0,
) -> datetime | None:
    """When a candidate that may not run now could first run, if time alone can change that.

    None means only a change to its files can (a gate answered, a goal resumed,
    a compute share raised): an index waits for that goal's change hint and
    spends nothing on it until then. ``quota_next`` is the quota decision's
    next eligible time (the window sliding); a refusal with none (the host's
    memory or load) is looked at again after ``host_recheck_s``. A goal that
    waits for another goal's turn in its workdir is woken by that turn's
    release (a hint); its time is only the holder's lease expiry, in case it died.
    """
    why = why_ineligible(candidate, now=now)
    timed = {
        Ineligible.LEASED: candidate.leased_until,
        Ineligible.WORKDIR_BUSY: candidate.workdir_busy_until,
        Ineligible.NOT_YET_ELIGIBLE: candidate.next_eligible_at,
    }
    if why is None:
        return now
    if why in timed:
        return timed[why]
    if why is Ineligible.QUOTA and candidate.goal.quota.compute > 0:
        return quota_next or now + timedelta(seconds=host_recheck_s)
    return None  # not active, no compute share, or a gate waits for a human


def fair_share(candidate: Candidate) -> float:
    """Spent wall time per unit of compute share: lower means the goal is owed more time."""
    share = candidate.goal.quota.compute
    if share <= 0:
        return math.inf
    return candidate.spent_wall_s / share


def rank_key(candidate: Candidate) -> tuple[int, float, str]:
    """Sort key: priority (higher first), fair share (lower first), then id."""
    return (-candidate.goal.priority, fair_share(candidate), candidate.goal_id)


def select(candidates: Iterable[Candidate], *, now: datetime) -> list[Candidate]:
    """The eligible candidates, best first.

    An agent tries them in this order until one claim succeeds: another agent
    may have claimed the first one between the read and the claim.
    """
    eligible = [c for c in candidates if why_ineligible(c, now=now) is None]
    return sorted(eligible, key=rank_key)


def select_one(candidates: Sequence[Candidate], *, now: datetime) -> Candidate | None:
    """The best eligible candidate, or None when nothing may run."""
    ranked = select(candidates, now=now)
    return ranked[0] if ranked else None
