"""Gather select's inputs from the runtime root: the I/O edge of :mod:`loopx.select`."""

from __future__ import annotations

import socket
from datetime import UTC, datetime
from typing import Final

import psutil

import structlog

from loopx.errors import CorruptFileError, LoopxError
from loopx.files import read_model_or_none
from loopx.lease import Lease
from loopx.registry import Goal, GoalStatus, Registry, load_registry
from loopx.root import Layout
from loopx.select import Candidate
from loopx.state import load_state

log = structlog.get_logger(__name__)

# psutil create_time() is rounded differently across reads (clock ticks); pids recycle slower.
PID_START_TOLERANCE_S: Final = 0.05


def lease_expiry(layout: Layout, goal_id: str) -> datetime | None:
    """When the goal's current lease expires, or None when there is none.

    A damaged lease file counts as held: the claim path (``loopx.lease``)
    owns deciding what to do with it; select only stays away.
    """
    try:
        lease = read_model_or_none(layout.lease_file(goal_id), Lease)
    except CorruptFileError:
        return datetime.max.replace(tzinfo=UTC)
    if lease is None or not holder_alive(lease):
        return None
    return lease.expires_at


def holder_alive(lease: Lease) -> bool:
    """Whether the lease's holder process still runs (always True for another machine's holder).

    A holder SIGKILLed mid-turn leaves an unexpired lease; treating it as free
    lets the next claim take it over (and recover the turn) at once instead of
    waiting for the expiry. The claim re-checks this under the goal's lock.
    """
    if lease.hostname != socket.gethostname():
        return True
    try:
        proc = psutil.Process(lease.pid)
        return abs(proc.create_time() - lease.pid_started_at) < PID_START_TOLERANCE_S and (
            proc.status() != psutil.STATUS_ZOMBIE
        )
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def candidate_of(layout: Layout, goal: Goal, *, now: datetime) -> Candidate:
    """Read one goal's select inputs (state, lease, quota decision).

    Raises:
        LoopxError: a file of the goal is damaged or a lock timed out.
    """
    from loopx.quota import decide  # noqa: PLC0415 - written in parallel; bound at call time

    state = load_state(layout, goal.id)
    leased_until = lease_expiry(layout, goal.id)
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
