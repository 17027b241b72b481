"""One turn per workdir: a lock on the directory a turn runs in, taken with the goal's claim.

Two goals whose workdirs resolve (realpath) to the same directory, or one
inside the other, never run turns at the same time. The lock is
``workdirs/<key>.json`` (``key``: a digest of the real path), created
exclusively right after the goal's lease, naming the goal and the lease's
epoch. It lives exactly as long as that lease may: a hold whose goal has no
lease of that epoch any more, or whose lease may be taken over
(:func:`loopx.turn.lease.takeover_allowed`: a dead holder at once, a silent
one after expiry and grace), is stale and is taken over; a live one is never
broken. A takeover raises the goal's epoch, which makes the old hold stale:
the hold is fenced by the lease it was taken with.

A stale hold of another goal is a turn whose agent died: its host and the
host's descendants may still write into the directory. The hold is handed
back as ``stale`` instead of taken over; the claimant ends that turn's
processes (:func:`loopx.turn.steps.workplace.hold_workdir`) and only then
takes the hold over, so no two turns' processes ever share the workdir.

Nesting, without a scan of the goals: a holder of ``/repo/a`` also leaves a
marker ``workdirs/<key(/repo)>.below/<key(/repo/a)>`` under each ancestor;
a claim of ``/repo`` finds held descendants in its own ``.below/`` (one
listing, usually empty) and held ancestors by one ``stat`` per path level.
A marker outlives its hold: the next claim of the same workdir finds it made
(a file created and removed per path level was the dearest part of the lock),
and a claim of the ancestor that finds one whose hold is gone removes it.
Each claimant first makes its own records, then looks for the other's, so
two overlapping claims cannot both miss each other (at worst both back off
and try again).

A claimant looks first, without a lock and before its claim (:func:`busy_with`),
so a goal that would only wait does not raise its epoch; the lock taken after
the claim still decides a race. A claimant that finds the workdir busy leaves
``goals/<id>/turns/.workdir-wait.json`` (status shows "workdir busy: goal X
runs a turn there") and a marker in the holder's ``.waiters/``; the holder's
release removes both and leaves a change hint for each waiter, which wakes the
agents that sleep on hints. Until then selection passes the goal over
(:func:`waits_on_live_hold`, one read of a wait note that is usually absent),
so it is not claimed again on a timer.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from loopx.errors import CorruptFileError
from loopx.log import get_logger
from loopx.registry.goalrecords import Goal
from loopx.registry.worktree_record import turn_workdir as worktree_turn_workdir
from loopx.root import Layout
from loopx.root.hints import note_goal_changed
from loopx.storage.dirs import ensure_dir
from loopx.storage.files import atomic_write_model, exclusive_create
from loopx.storage.locks import locked
from loopx.turn.lease import Lease, holder_state, read_lease, takeover_allowed
from loopx.turn.workdirfiles import (
    WorkdirHold,
    WorkdirWait,
    ancestors,
    below_dir,
    hold_file,
    holds_dir,
    read_hold,
    read_wait,
    real_workdir,
    wait_file,
    waiters_dir,
    workdir_key,
)

log = get_logger(__name__)


@dataclass(frozen=True, slots=True)
class WorkdirClaim:
    """What :func:`acquire_workdir` got: the hold, or the live hold that blocks it."""

    hold: WorkdirHold | None
    blocking: WorkdirHold | None = None
    took_over: WorkdirHold | None = None
    # A dead turn's hold of another goal, not taken over: its processes must be gone first.
    stale: WorkdirHold | None = None


def turn_workdir(layout: Layout, goal: Goal) -> str:
    """Where the goal's turns run, and so the directory its lock is on.

    A goal with its own git worktree runs, and locks, there
    (:func:`loopx.registry.worktree_record.turn_workdir`: a path fixed by the goal, made
    or not); every other goal in its workdir.
    """
    return str(worktree_turn_workdir(layout, goal))


def hold_is_live(layout: Layout, hold: WorkdirHold, *, now: datetime, grace_s: float) -> bool:
    """Whether a hold still stands: its goal's lease of that epoch exists and may not be taken over."""
    try:
        lease: Lease | None = read_lease(layout, hold.goal_id)
    except CorruptFileError:
        return True  # the goal's claim decides about a damaged lease; respect the hold till then
    if lease is None or lease.epoch != hold.epoch:
        return False
    holder = holder_state(lease, hostname=socket.gethostname())
    return not takeover_allowed(lease, holder, now=now, grace_s=grace_s)


def _take_exact(
    layout: Layout,
    hold: WorkdirHold,
    *,
    now: datetime,
    grace_s: float,
    cleared: WorkdirHold | None = None,
) -> WorkdirClaim:
    """Create the hold file of ``hold.path``, taking over a stale one, under its lock.

    Another goal's stale hold is taken over only when it is ``cleared`` (its
    turn's processes are known gone); otherwise it is handed back as ``stale``.
    """
    path = hold_file(layout, hold.path)
    data = hold.model_dump_json(indent=2).encode() + b"\n"
    if exclusive_create(path, data, durable=False):  # the common case: a free workdir
        return WorkdirClaim(hold=hold)
    with locked(path):  # held already: judge and take over under the hold's lock
        if exclusive_create(path, data, durable=False):
            return WorkdirClaim(hold=hold)
        current = read_hold(path)
        if current is not None and current.goal_id == hold.goal_id:
            took = None  # our own goal's earlier hold (its lease was taken over: fenced)
        elif current is not None and hold_is_live(layout, current, now=now, grace_s=grace_s):
            return WorkdirClaim(hold=None, blocking=current)
        elif current is not None and current != cleared:
            return WorkdirClaim(hold=None, stale=current)
        else:
            took = current
        atomic_write_model(path, hold, durable=False)
    if took is not None:
        log.warning(
            "workdir_hold_taken_over", goal_id=hold.goal_id, path=hold.path, previous=took.goal_id
        )
        _wake_waiters(layout, took.path)
    return WorkdirClaim(hold=hold, took_over=took)


def _blocking_relative(
    layout: Layout, hold: WorkdirHold, *, now: datetime, grace_s: float
) -> WorkdirHold | None:
    """A live hold of an ancestor or descendant of ``hold.path`` (other goals only)."""
    for ancestor in ancestors(hold.path):
        other = read_hold(hold_file(layout, ancestor))
        if (
            other is not None
            and other.goal_id != hold.goal_id
            and hold_is_live(layout, other, now=now, grace_s=grace_s)
        ):
            return other
    below = below_dir(layout, hold.path)
    try:
        names = os.listdir(below)
    except FileNotFoundError:
        return None
    for name in names:
        other = read_hold(holds_dir(layout) / f"{name}.json")
        if other is None or not hold_is_live(layout, other, now=now, grace_s=grace_s):
            with contextlib.suppress(OSError):  # a stale marker: its holder is gone
                (below / name).unlink()
            continue
        if other.goal_id != hold.goal_id:
            return other
    return None


def busy_with(
    layout: Layout, workdir: str, goal_id: str, *, now: datetime, grace_s: float
) -> WorkdirHold | None:
    """The live hold of another goal on ``workdir``, above it or inside it, read without a lock.

    Only a shortcut for a claimant that has not taken anything yet: None sends it on to
    the claim and :func:`acquire_workdir`, which decides.
    """
    real = real_workdir(workdir)
    exact = read_hold(hold_file(layout, real))
    if (
        exact is not None
        and exact.goal_id != goal_id
        and hold_is_live(layout, exact, now=now, grace_s=grace_s)
    ):
        return exact
    probe = WorkdirHold(path=real, goal_id=goal_id, epoch=0, agent_id="", acquired_at=now)
    return _blocking_relative(layout, probe, now=now, grace_s=grace_s)


def waits_on_live_hold(
    layout: Layout, goal_id: str, *, now: datetime, grace_s: float
) -> datetime | None:
    """Until when the goal waits for another goal's turn in its workdir; None: it does not wait.

    The goal's wait note must name a hold that still stands (the holder's release removes
    the note and leaves a change hint, which wakes the goal); the answer is the holder's
    lease expiry and grace, after which an index looks again in case the holder died
    without a release.
    """
    wait = read_wait(layout, goal_id)
    if wait is None:
        return None
    hold = read_hold(hold_file(layout, wait.holder_path))
    if hold is None or hold.goal_id != wait.holder_goal_id:
        return None
    if not hold_is_live(layout, hold, now=now, grace_s=grace_s):
        return None
    try:
        lease = read_lease(layout, hold.goal_id)
    except CorruptFileError:
        lease = None
    if lease is None:
        return None
    return lease.expires_at + timedelta(seconds=grace_s)


def acquire_workdir(
    layout: Layout,
    workdir: str,
    lease: Lease,
    *,
    now: datetime,
    grace_s: float,
    cleared: WorkdirHold | None = None,
) -> WorkdirClaim:
    """Take the workdir lock of a goal whose lease is held (right after the claim).

    Returns:
        The hold, or (``hold`` None) the live hold of another goal on the
        same directory, one above it or one inside it, or (``stale``) another
        goal's hold whose turn is over but whose processes may still run:
        the caller ends them and comes back with that hold as ``cleared``.

    """
    real = real_workdir(workdir)
    hold = WorkdirHold(
        path=real, goal_id=lease.goal_id, epoch=lease.epoch, agent_id=lease.agent_id,
        acquired_at=now,
    )  # fmt: skip
    ensure_dir(holds_dir(layout))
    claim = _take_exact(layout, hold, now=now, grace_s=grace_s, cleared=cleared)
    if claim.hold is None:
        return claim
    key = workdir_key(real)
    for ancestor in ancestors(real):  # our markers first, then look for the others
        marker = below_dir(layout, ancestor) / key
        if not os.path.lexists(marker):  # left by an earlier hold of this workdir, usually
            exclusive_create(ensure_dir(marker.parent) / key, b"", durable=False)
    blocking = _blocking_relative(layout, hold, now=now, grace_s=grace_s)
    if blocking is not None:
        release_workdir(layout, hold)
        return WorkdirClaim(hold=None, blocking=blocking)
    with contextlib.suppress(OSError):
        wait_file(layout, lease.goal_id).unlink()
    return claim


def release_workdir(layout: Layout, hold: WorkdirHold) -> None:
    """Remove a hold if it is still this goal's and epoch's, and wake its waiters.

    Its markers stay for the next hold of the workdir (the module's docstring says why).
    """
    path = hold_file(layout, hold.path)
    with locked(path):
        current = read_hold(path)
        if current is not None and (current.goal_id, current.epoch) == (hold.goal_id, hold.epoch):
            path.unlink(missing_ok=True)
    _wake_waiters(layout, hold.path)


def _wake_waiters(layout: Layout, held_path: str) -> None:
    waiters = waiters_dir(layout, held_path)
    try:
        names = os.listdir(waiters)
    except FileNotFoundError:
        return
    for goal_id in names:
        with contextlib.suppress(OSError):
            (waiters / goal_id).unlink()
        with contextlib.suppress(OSError):
            wait_file(layout, goal_id).unlink()
        note_goal_changed(layout, goal_id)  # wakes the agents' index and status


def note_waiting(
    layout: Layout,
    goal_id: str,
    workdir: str,
    blocking: WorkdirHold,
    *,
    now: datetime,
    processes: Iterable[int] = (),
) -> WorkdirWait:
    """Record that ``goal_id`` waits for ``blocking``'s turn, to be woken when it ends.

    ``processes``: the turn is over but these processes of it still run.
    """
    wait = WorkdirWait(
        workdir=real_workdir(workdir),
        holder_goal_id=blocking.goal_id,
        holder_path=blocking.path,
        since=now,
        processes=sorted(processes),
    )
    current = read_wait(layout, goal_id)
    if (
        current is None
        or current.holder_goal_id != wait.holder_goal_id
        or current.processes != wait.processes
    ):
        atomic_write_model(wait_file(layout, goal_id), wait, durable=False)
        note_goal_changed(layout, goal_id)
    exclusive_create(ensure_dir(waiters_dir(layout, blocking.path)) / goal_id, b"", durable=False)
    # Released while we wrote? Then nobody will wake us: wake ourselves.
    if read_hold(hold_file(layout, blocking.path)) is None:
        _wake_waiters(layout, blocking.path)
    return wait


__all__ = [
    "WorkdirClaim",
    "acquire_workdir",
    "busy_with",
    "hold_is_live",
    "note_waiting",
    "release_workdir",
    "turn_workdir",
    "waits_on_live_hold",
]
