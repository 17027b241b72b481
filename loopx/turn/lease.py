"""Leases: which agent works on a goal now, fenced by a monotonic epoch.

A claim is an exclusive create of ``goals/<id>/lease.json`` made under the
goal's lock (``goals/<id>/epoch.lock``) after raising the fencing counter in
``goals/<id>/epoch``. Every durable write of a turn happens inside
:meth:`Fence.held`, which takes the same lock and refuses the write once the
counter moved past the holder's epoch. A takeover raises the counter under
that lock, so a frozen holder that wakes up later cannot slip a write in
between the check and the write.
"""

from __future__ import annotations

import functools
import os
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Final, Literal

from loopx import environ
from loopx.errors import CorruptFileError
from loopx.log import get_logger
from loopx.model import Record, UtcDatetime
from loopx.process import ProcessIdentity, started_at
from loopx.root import Layout
from loopx.root.goallock import goal_lock
from loopx.root.hints import note_goal_changed
from loopx.storage.files import atomic_write_model, exclusive_create, read_model_or_none
from loopx.turn.damagedlease import damaged_lease_blocks_until
from loopx.turn.fencing import Fence, raise_epoch, read_epoch, recorded_epoch

log = get_logger(__name__)

DEFAULT_TTL_S: Final = 30.0
# How far the host's last output time must move before status is told (a change hint): a
# renewal every 10 s must not re-read every running goal's files.
LAST_OUTPUT_HINT_S: Final = 60.0
# How long past expiry a lease whose holder we cannot see (another hostname,
# or alive but silent here) is still respected before a takeover.
DEFAULT_GRACE_S: Final = 30.0


def lease_ttl_s(env: Mapping[str, str] | None = None) -> float:
    """The lease duration: ``LOOPX_LEASE_TTL_S``, else 30 s."""
    return environ.seconds(environ.LEASE_TTL_S, DEFAULT_TTL_S, os.environ if env is None else env)


def lease_grace_s(env: Mapping[str, str] | None = None) -> float:
    """The takeover grace past expiry: ``LOOPX_LEASE_GRACE_S``, else 30 s."""
    return environ.seconds(
        environ.LEASE_GRACE_S, DEFAULT_GRACE_S, os.environ if env is None else env
    )


class Lease(Record):
    """``goals/<id>/lease.json``, created exclusively by the claiming agent.

    ``epoch`` is the goal's fencing counter at claim time; every later write
    of the turn checks it against ``goals/<id>/epoch`` and is refused
    (``lease_lost``) once a takeover raised the counter.
    """

    schema_version: Literal[1] = 1
    goal_id: str
    agent_id: str
    pid: int
    pid_started_at: float  # psutil create_time() of `pid`, to tell a reused pid apart
    hostname: str
    epoch: int
    turn_key: str | None = None
    acquired_at: UtcDatetime
    renewed_at: UtcDatetime
    expires_at: UtcDatetime
    # What the holder last saw of its running host, written with each renewal (a coarse
    # interval, not per byte): when the host last wrote output, and a stall rung in force.
    last_output_at: UtcDatetime | None = None
    activity: str | None = None


class Holder(StrEnum):
    """What a claimant knows about the current lease holder."""

    ALIVE = "alive"  # the holder's pid runs here with the recorded start time
    DEAD = "dead"  # the holder's pid is gone (or reused) on this host
    UNKNOWN = "unknown"  # the holder runs on another host


@dataclass(frozen=True, slots=True)
class ClaimResult:
    """The outcome of :func:`claim`: the new lease, or the lease that blocks us."""

    lease: Lease | None
    blocking: Lease | None = None
    took_over: Lease | None = None  # the expired lease this claim replaced


def takeover_allowed(lease: Lease, holder: Holder, *, now: datetime, grace_s: float) -> bool:
    """Whether a claimant may replace ``lease``. Pure.

    A dead holder on this host can write nothing more, so its lease goes at
    once. A live or unseen holder keeps its lease until it expired and a
    grace period passed: it may be slow (or frozen), and fencing refuses its
    late writes once the epoch rises.
    """
    if holder is Holder.DEAD:
        return True
    return now >= lease.expires_at + timedelta(seconds=grace_s)


def holder_state(lease: Lease, *, hostname: str) -> Holder:
    """Whether the lease's holder process still runs (psutil; this host only)."""
    if lease.hostname != hostname:
        return Holder.UNKNOWN
    alive = ProcessIdentity(lease.pid, lease.pid_started_at).alive()
    return Holder.ALIVE if alive else Holder.DEAD


def _held_by_this_process(lease: Lease, hostname: str, pid: int) -> bool:
    return (lease.hostname, lease.pid) == (hostname, pid) and lease.pid_started_at == (
        own_started_at(pid)
    )


@functools.cache
def own_started_at(pid: int) -> float:
    """The start time of this process (``pid``: its pid, so a forked child asks anew).

    Constant for a process's life: read once, not at every claim (psutil reads
    ``/proc/<pid>/stat`` and the boot time, about 0.1 ms).
    """
    return started_at(pid) or 0.0


def read_lease(layout: Layout, goal_id: str) -> Lease | None:
    """The goal's current lease, or None.

    Raises:
        CorruptFileError: the lease file is damaged.

    """
    return read_model_or_none(layout.lease_file(goal_id), Lease)


def claim(
    layout: Layout,
    goal_id: str,
    *,
    agent_id: str,
    now: datetime,
    ttl_s: float | None = None,
    grace_s: float | None = None,
    turn_key: str | None = None,
    reclaim_own: bool = False,
) -> ClaimResult:
    """Claim the goal's lease for this process, taking over a dead or long-expired one.

    With ``reclaim_own`` (the caller runs no turn of this goal now), a lease
    this very process holds is taken over at once too: a resource error
    (EMFILE) cut its turn short before the release, and waiting for it to
    expire would stall the goal for a lease's length.

    A lease file that cannot be read is taken over once
    :func:`~loopx.turn.damagedlease.damaged_lease_free_at` says so (an empty one at once), with the
    epoch raised like any takeover.

    Returns:
        The new lease, or (``lease`` None) the live lease that blocks the
        claim (``blocking`` None: a damaged lease not yet old enough).

    Raises:
        CorruptFileError: the epoch file is damaged.

    """
    ttl_s = lease_ttl_s() if ttl_s is None else ttl_s
    grace_s = lease_grace_s() if grace_s is None else grace_s
    pid = os.getpid()
    lease_of = functools.partial(
        _new_lease, goal_id, agent_id=agent_id, pid=pid, turn_key=turn_key, now=now, ttl_s=ttl_s
    )
    with goal_lock(layout, goal_id):
        recorded = recorded_epoch(layout, goal_id)
        created = _create_free(layout, lease_of, recorded)
        if created is not None:
            return ClaimResult(lease=created)
        found = _claimable(
            layout, goal_id, now=now, ttl_s=ttl_s, grace_s=grace_s, own=reclaim_own, pid=pid
        )
        if isinstance(found, ClaimResult):
            return found
        current = found[0]
        lease = lease_of(max(recorded, current.epoch if current else 0) + 1)
        # The counter rises before the lease names the epoch: a crash in between
        # wastes an epoch number, never hands one out twice.
        raise_epoch(layout, goal_id, lease.epoch)
        atomic_write_model(layout.lease_file(goal_id), lease, durable=False)
    return ClaimResult(lease=lease, took_over=current)


def _new_lease(
    goal_id: str,
    epoch: int,
    *,
    agent_id: str,
    pid: int,
    turn_key: str | None,
    now: datetime,
    ttl_s: float,
) -> Lease:
    """The lease this process makes at ``epoch``, acquired ``now``."""
    return Lease(
        goal_id=goal_id,
        agent_id=agent_id,
        pid=pid,
        pid_started_at=own_started_at(pid),
        hostname=socket.gethostname(),
        epoch=epoch,
        turn_key=turn_key,
        acquired_at=now,
        renewed_at=now,
        expires_at=now + timedelta(seconds=ttl_s),
    )


def _create_free(layout: Layout, lease_of: Callable[[int], Lease], recorded: int) -> Lease | None:
    """Claim a free goal (no lease file) at the next epoch; None: a lease file exists.

    Called under the goal's lock. The exclusive create is the check, so the lease is
    not read here (the caller read it, without the lock, to skip a held goal). A crash
    before the counter rises leaves a lease naming the new epoch, which the next
    claim's takeover counts: an epoch number is wasted, never reused.
    """
    lease = lease_of(recorded + 1)
    path = layout.lease_file(lease.goal_id)
    if not exclusive_create(path, lease.model_dump_json(indent=2).encode() + b"\n", durable=False):
        return None
    try:
        raise_epoch(layout, lease.goal_id, lease.epoch)
    except BaseException:  # a refused write (ENOSPC): the goal stays free, as before
        path.unlink(missing_ok=True)
        raise
    return lease


def _claimable(
    layout: Layout,
    goal_id: str,
    *,
    now: datetime,
    ttl_s: float,
    grace_s: float,
    own: bool,
    pid: int,
) -> tuple[Lease | None, bool] | ClaimResult:
    """The lease a claim replaces (None: none) and whether it was damaged; or what blocks it.

    Called under the goal's lock.
    """
    hostname = socket.gethostname()
    path = layout.lease_file(goal_id)
    try:
        current = read_lease(layout, goal_id)
    except CorruptFileError as e:
        if damaged_lease_blocks_until(path, now=now, ttl_s=ttl_s, grace_s=grace_s):
            return ClaimResult(lease=None)
        log.warning("damaged_lease_taken_over", goal_id=goal_id, path=str(path), problem=e.problem)
        return None, True
    if current is None:
        return None, False
    mine = own and _held_by_this_process(current, hostname, pid)
    if not mine and not takeover_allowed(
        current, holder_state(current, hostname=hostname), now=now, grace_s=grace_s
    ):
        return ClaimResult(lease=None, blocking=current)
    return current, False


def fence_of(layout: Layout, lease: Lease) -> Fence:
    """The write fence of a held lease."""
    return Fence(layout, lease.goal_id, lease.epoch)


def renew(
    layout: Layout,
    lease: Lease,
    *,
    now: datetime,
    ttl_s: float | None = None,
    last_output_at: datetime | None = None,
    activity: str | None = None,
) -> Lease:
    """Extend a held lease; refuse if a takeover happened.

    ``last_output_at`` and ``activity`` are what status shows of the running host.

    The lease file is rewritten from ``lease``, not read: under the goal's
    lock, a counter still at the lease's epoch means no claim came after this
    holder's (every claim raises it), so the file is this holder's.

    Raises:
        LeaseLostError: the epoch moved on.

    """
    with fence_of(layout, lease).held():
        ttl = lease_ttl_s() if ttl_s is None else ttl_s
        renewed = lease.model_copy(
            update={
                "renewed_at": now,
                "expires_at": now + timedelta(seconds=ttl),
                "last_output_at": last_output_at,
                "activity": activity,
            }
        )
        atomic_write_model(layout.lease_file(lease.goal_id), renewed, durable=False)
    if _shows_more(lease, renewed):
        note_goal_changed(layout, lease.goal_id)
    return renewed


def _shows_more(before: Lease, after: Lease) -> bool:
    """Whether status should see the renewal: a new activity, or the last output moved on."""
    if before.activity != after.activity:
        return True
    old, new = before.last_output_at, after.last_output_at
    if old is None or new is None:
        return old != new
    return new - old >= timedelta(seconds=LAST_OUTPUT_HINT_S)


def release(layout: Layout, lease: Lease) -> bool:
    """Remove the lease if it is still ours. Returns whether it was removed.

    Ours: the goal's counter still names its epoch (every claim raises the
    counter under the goal's lock, so no other lease can have been made
    since), which is read instead of the lease itself. The unlink is not
    fsynced: if it is lost in a crash the lease reappears with a dead holder
    and is taken over at once.
    """
    with goal_lock(layout, lease.goal_id):
        if read_epoch(layout, lease.goal_id) != lease.epoch:
            return False
        try:
            layout.lease_file(lease.goal_id).unlink()
        except FileNotFoundError:
            return False
    return True


def clear_dead_lease(layout: Layout, goal_id: str, *, now: datetime | None = None) -> bool:
    """Remove the goal's lease if nobody can hold it any more; return whether it was removed.

    Removed: a lease whose holder is dead on this host, and a damaged one
    that :func:`~loopx.turn.damagedlease.damaged_lease_free_at` frees. Either would be taken over at
    the next claim anyway; clearing it at recovery makes ``status`` stop
    reporting the goal as running.
    """
    path = layout.lease_file(goal_id)
    if not path.exists():
        return False
    now = now or datetime.now(UTC)
    with goal_lock(layout, goal_id):
        try:
            current = read_lease(layout, goal_id)
        except CorruptFileError:
            if damaged_lease_blocks_until(
                path, now=now, ttl_s=lease_ttl_s(), grace_s=lease_grace_s()
            ):
                return False
            log.warning("damaged_lease_cleared", goal_id=goal_id, path=str(path))
            path.unlink(missing_ok=True)
            return True
        if (
            current is None
            or holder_state(current, hostname=socket.gethostname()) is not Holder.DEAD
        ):
            return False
        path.unlink(missing_ok=True)
    return True
