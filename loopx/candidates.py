"""Gather select's inputs from the runtime root: the I/O edge of :mod:`loopx.select`."""

from __future__ import annotations

import socket
from datetime import UTC, datetime, timedelta

import structlog

from loopx.errors import CorruptFileError, LoopxError
from loopx.lease import DEFAULT_GRACE_S, holder_state, read_lease, takeover_allowed
from loopx.quota import decide
from loopx.registry import Goal, GoalStatus, Registry, load_registry
from loopx.root import Layout
from loopx.select import Candidate
from loopx.state import load_state

log = structlog.get_logger(__name__)


def lease_expiry(layout: Layout, goal_id: str, *, now: datetime) -> datetime | None:
    """Until when a live holder leases the goal, or None when a claim could succeed now.

    A holder SIGKILLed mid-turn leaves an unexpired lease; counting it as free
    lets the next claim take it over (and recover the turn) at once instead
    of after the expiry. :func:`loopx.lease.claim` re-checks under the goal's
    lock. A damaged lease file counts as held: the claim path owns deciding
    what to do with it; select only stays away.
    """
    try:
        lease = read_lease(layout, goal_id)
    except CorruptFileError:
        return datetime.max.replace(tzinfo=UTC)
    if lease is None:
        return None
    holder = holder_state(lease, hostname=socket.gethostname())
    if takeover_allowed(lease, holder, now=now, grace_s=DEFAULT_GRACE_S):
        return None
    return max(lease.expires_at + timedelta(seconds=DEFAULT_GRACE_S), now + timedelta(seconds=1))


def candidate_of(layout: Layout, goal: Goal, *, now: datetime) -> Candidate:
    """Read one goal's select inputs (state, lease, quota decision).

    Raises:
        LoopxError: a file of the goal is damaged or a lock timed out.

    """
    state = load_state(layout, goal.id)
    leased_until = lease_expiry(layout, goal.id, now=now)
    decision = decide(layout, goal, now=now, leased=False)
    return Candidate(
        goal=goal,
        open_gates=len(state.open_gates),
        next_eligible_at=state.next_eligible_at,
        leased_until=leased_until,
        quota_allowed=decision.allowed,
        spent_wall_s=decision.spent_wall_s,
    )


def gather_candidates(
    layout: Layout, *, now: datetime, registry: Registry | None = None
) -> list[Candidate]:
    """Select inputs of every active goal; a goal whose files cannot be read is skipped (logged).

    Goals that are not active are left out: they can never be selected, and
    reading their files would cost time on every idle poll.
    """
    reg = registry if registry is not None else load_registry(layout)
    out: list[Candidate] = []
    for goal in reg.goals.values():
        if goal.status is not GoalStatus.ACTIVE:
            continue
        try:
            out.append(candidate_of(layout, goal, now=now))
        except LoopxError as e:
            log.warning("candidate_unreadable", goal_id=goal.id, error=e.message)
    return out
