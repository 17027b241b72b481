"""The claim step: take the goal's lease, or say who holds it.

Agents that ranked the same goal first race for it: a lease that plainly
blocks is seen without the goal's lock (which the winner holds across its
fsyncs), so the losers move on at once. Only the claim itself, under the
lock, decides (:func:`loopx.turn.lease.claim`). A workdir another goal's
live turn plainly holds stops the claim before it is made (the goal's epoch
rises only for a turn that may run). After a takeover, every
process still working for the goal is killed before anything else: fencing
stops a stale holder's writes, this stops its host.
"""

from __future__ import annotations

import socket
from datetime import datetime

import structlog

from loopx.errors import CorruptFileError
from loopx.log import get_logger
from loopx.model import utcnow
from loopx.root import Layout
from loopx.storage.dirs import forget_checked_dirs
from loopx.storage.locks import lock_busy
from loopx.turn.lease import (
    Lease,
    claim,
    fence_of,
    holder_state,
    read_lease,
    release,
    takeover_allowed,
)
from loopx.turn.steps.context import Claim, LeaseHolder, Stop, StopKind, TurnContext
from loopx.turn.steps.workplace import plainly_busy

log = get_logger(__name__)


def claim_lease(ctx: TurnContext) -> TurnContext | Stop:
    """Claim the goal's lease (the epoch raised), or stop: held by a live agent, or busy now."""
    layout, goal_id = ctx.layout, ctx.goal.id
    forget_checked_dirs()  # hosts ran since the last turn: every directory is checked again
    visible = visibly_held(layout, goal_id, now=utcnow(), grace_s=ctx.config.lease_grace_s)
    if visible is not None:
        return Stop(StopKind.WAIT, "held", claimed=False, blocking_agent=visible.agent_id)
    busy = plainly_busy(ctx)  # a claim now would only raise the epoch to wait
    if busy is not None:
        return busy
    if ctx.options.skip_if_busy and lock_busy(layout.epoch_file(goal_id)):  # the goal lock's
        return Stop(StopKind.WAIT, "busy", claimed=False, busy=True)
    in_flight = ctx.options.in_flight
    # The claim fsyncs only the raised counter's content; its directory entry is made
    # durable by the turn's writeback (loopx.turn.fencing.recorded_epoch says why).
    claimed = claim(
        layout,
        goal_id,
        agent_id=ctx.agent_id,
        now=utcnow(),
        ttl_s=ctx.config.lease_ttl_s,
        grace_s=ctx.config.lease_grace_s,
        # No turn of this goal runs in this process: a lease of ours is one an error left.
        reclaim_own=in_flight is not None and goal_id not in in_flight,
    )
    lease = claimed.lease
    if lease is None:
        blocking = claimed.blocking.agent_id if claimed.blocking else None
        return Stop(StopKind.WAIT, "held", claimed=False, blocking_agent=blocking)
    if in_flight is not None:
        in_flight.add(goal_id)
    structlog.contextvars.bind_contextvars(epoch=lease.epoch)  # unbound by the release step
    held = ctx.but(
        claim=Claim(lease, fence_of(layout, lease), LeaseHolder(layout, lease, ctx.config))
    )
    if claimed.took_over is not None:
        log.warning("lease_taken_over", previous=claimed.took_over.agent_id)
        ctx.processes.kill_stale(layout, goal_id)
    return held


def release_lease(ctx: TurnContext) -> TurnContext:
    """Give the lease back (if it is still ours) and forget the turn's log bindings."""
    if ctx.claim is None:
        return ctx
    try:
        release(ctx.layout, ctx.claim.lease)
    finally:
        if ctx.options.in_flight is not None:
            ctx.options.in_flight.discard(ctx.goal.id)
        structlog.contextvars.unbind_contextvars("turn_key", "epoch")
    return ctx


def visibly_held(layout: Layout, goal_id: str, *, now: datetime, grace_s: float) -> Lease | None:
    """The goal's lease when it plainly blocks a claim now (read without the lock), else None.

    Only a shortcut: None (no lease, a damaged one, one that may be taken
    over) sends the caller to :func:`loopx.turn.lease.claim`, which decides under
    the goal's lock.
    """
    try:
        current = read_lease(layout, goal_id)
    except CorruptFileError:
        return None
    if current is None:
        return None
    holder = holder_state(current, hostname=socket.gethostname())
    return None if takeover_allowed(current, holder, now=now, grace_s=grace_s) else current
