"""The workdir and worktree steps: where the turn runs, held for it alone.

One turn per workdir: the lock of the goal's workdir is taken right after
its lease (:mod:`loopx.turn.workdir`), and a goal whose workdir another
goal's turn holds waits, saying for whom. A hold whose turn died with its
agent is taken over only once that turn's processes are gone: they are
killed first, the goal's wait note naming them meanwhile, and if one
outlives the kill the goal waits and tries again on a later claim.

A ``--worktree`` goal runs in its own git worktree on branch ``loopx/<id>``,
made crash-safely on its first claim (:mod:`loopx.worktree.creation`). A git
that a kill left running, or one whose lock a live git holds, is waited for
here, the lease renewed, for at most ``GIT_WAIT_S`` (a git program ends by
itself); a git killed under the claim is run again, up to
``GIT_KILLED_RETRIES`` times. A worktree that cannot be made (a lock another
program holds, a repository gone) opens one gate naming what to do, never a
second one for the same step while it is open, instead of failing the goal.
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import Final

from loopx.errors import GitError, WorktreeError
from loopx.log import get_logger
from loopx.model import utcnow
from loopx.state import Gate, GoalState, update_state
from loopx.turn.journal import newest_journal
from loopx.turn.steps.context import Stop, StopKind, TurnContext
from loopx.turn.workdir import (
    acquire_workdir,
    busy_with,
    note_waiting,
    release_workdir,
    turn_workdir,
)
from loopx.turn.workdirfiles import WorkdirHold
from loopx.worktree.creation import WorktreeLockHeldError, turn_goal

log = get_logger(__name__)

STALE_ROUNDS: Final = 3  # dead holders ended in a row before the goal waits for a later claim
GIT_WAIT_S: Final = 120.0  # a git program holding the half-made worktree ends by then
GIT_POLL_S: Final = 0.2
GIT_KILLED_RETRIES: Final = 3  # a git killed by a signal under this claim is run again
WORKTREE_GATE: Final = "worktree"  # the gates this step opens (``opened_by``)


def plainly_busy(ctx: TurnContext) -> Stop | None:
    """Before the claim: the wait, when another goal's live turn plainly holds the workdir.

    Nothing is taken, so the goal's epoch stays as it is while it waits; the
    holder's release wakes it (the wait note and a change hint). None sends
    the claimant on to the claim, and :func:`hold_workdir` decides under the lock.
    """
    workdir = turn_workdir(ctx.layout, ctx.goal)
    now = utcnow()
    holder = busy_with(ctx.layout, workdir, ctx.goal.id, now=now, grace_s=ctx.config.lease_grace_s)
    if holder is None:
        return None
    return _wait_for(ctx, workdir, holder, now=now)


def _wait_for(ctx: TurnContext, workdir: str, holder: WorkdirHold, *, now: datetime) -> Stop:
    log.info("workdir_busy", holder=holder.goal_id, path=holder.path)
    note_waiting(ctx.layout, ctx.goal.id, workdir, holder, now=now)
    return Stop(StopKind.WAIT, "workdir_busy", claimed=False, workdir_busy=holder.goal_id)


def hold_workdir(ctx: TurnContext) -> TurnContext | Stop:
    """Take the lock of the goal's workdir, or stop: another goal's turn holds it.

    A dead turn's hold of another goal is taken over only once every process
    of that turn is gone (:func:`end_previous_turn`); one that outlives the
    kill makes this goal wait instead.
    """
    workdir = turn_workdir(ctx.layout, ctx.goal)
    lease = ctx.claimed.lease
    cleared: WorkdirHold | None = None
    for _ in range(STALE_ROUNDS):
        now = utcnow()
        taken = acquire_workdir(
            ctx.layout, workdir, lease, now=now, grace_s=ctx.config.lease_grace_s, cleared=cleared
        )
        if taken.hold is not None:
            return ctx.but(workdir=taken.hold)
        if taken.blocking is not None:
            return _wait_for(ctx, workdir, taken.blocking, now=now)
        if taken.stale is None:
            break
        stop = end_previous_turn(ctx, workdir, taken.stale)
        if stop is not None:
            return stop
        cleared = taken.stale
        ctx.claimed.holder.renew()
    return Stop(StopKind.WAIT, "workdir_busy", claimed=False)


def end_previous_turn(ctx: TurnContext, workdir: str, stale: WorkdirHold) -> Stop | None:
    """Kill what still runs of the dead turn that held the workdir; a wait stop if some outlives it.

    The turn is the previous holder's newest journal; its host and every
    descendant carry its ``LOOPX_TURN_KEY`` (even after ``setsid``). While
    they are killed (SIGTERM, SIGKILL after the kill grace, a bounded wait),
    the goal's wait note names them.
    """
    path = newest_journal(ctx.layout, stale.goal_id)
    if path is None:
        return None
    turn_key = path.stem
    layout, goal_id = ctx.layout, ctx.goal.id

    def found(pids: list[int]) -> None:
        log.info("waiting_for_previous_turn", previous=turn_key, pids=pids)
        note_waiting(layout, goal_id, workdir, stale, now=utcnow(), processes=pids)

    left = ctx.processes.end_turn(layout, turn_key, found=found)
    if not left:
        return None
    log.warning("previous_turn_alive", previous=turn_key, pids=left)
    note_waiting(layout, goal_id, workdir, stale, now=utcnow(), processes=left)
    return Stop(StopKind.WAIT, "previous_turn_alive", claimed=False, workdir_busy=stale.goal_id)


def unlock_workdir(ctx: TurnContext) -> TurnContext:
    """Give the workdir's lock back (waking the goals that wait for it)."""
    if ctx.workdir is not None:
        release_workdir(ctx.layout, ctx.workdir)
    return ctx


def enter_worktree(ctx: TurnContext) -> TurnContext | Stop:
    """The goal with ``workdir`` its worktree (made now if need be); a gate if it cannot be.

    Raises:
        LeaseLostError: the claim was taken over.
    """
    goal = ctx.goal
    deadline = time.monotonic() + GIT_WAIT_S
    killed = 0
    while True:
        try:
            return ctx.but(goal=turn_goal(ctx.layout, goal, ctx.fence))
        except WorktreeLockHeldError as e:
            if not e.only_git or time.monotonic() >= deadline:
                return _gate(ctx, e)
            log.info("worktree_waiting_for_git", lock=str(e.lock), holders=e.message)
        except GitError as e:
            if e.code >= 0 or killed >= GIT_KILLED_RETRIES:
                return _gate(ctx, e)
            killed += 1  # killed by a signal from outside: what it left is judged again
            log.warning("worktree_git_killed", command=" ".join(e.argv), code=e.code)
        except WorktreeError as e:
            return _gate(ctx, e)
        time.sleep(GIT_POLL_S)
        ctx.claimed.holder.renew()


def _gate(ctx: TurnContext, e: WorktreeError | GitError) -> Stop:
    """Open the worktree's gate, unless one is open already (one gate per cause); stop."""
    log.warning("worktree_failed", error=e.message)
    hint = f" ({e.hint})" if e.hint else ""
    question = (
        f"the goal's git worktree could not be made: {e.message}{hint}. Fix it and answer "
        f"this gate (`loopx gate resolve {ctx.goal.id} --answer fixed`); the next claim tries "
        "again"
    )
    now = utcnow()

    def once(state: GoalState) -> GoalState:
        if any(g.opened_by == WORKTREE_GATE for g in state.open_gates):
            return state  # the person already has this step's question
        gate = Gate(
            id=max((g.id for g in state.gates), default=0) + 1,
            question=question[:4000],
            opened_at=now,
            opened_by=WORKTREE_GATE,
        )
        return state.model_copy(update={"gates": [*state.gates, gate], "updated_at": now})

    update_state(ctx.layout, ctx.goal.id, once)
    return Stop(StopKind.GATE, "worktree")
