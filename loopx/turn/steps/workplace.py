"""The workdir and worktree steps: where the turn runs, held for it alone.

One turn per workdir: the lock of the goal's workdir is taken right after
its lease (:mod:`loopx.turn.workdir`), and a goal whose workdir another
goal's turn holds waits, saying for whom. A ``--worktree`` goal runs in its
own git worktree on branch ``loopx/<id>``, made crash-safely on its first
claim; one that cannot be made opens a gate instead of failing the goal.
"""

from __future__ import annotations

from loopx.errors import GitError, WorktreeError
from loopx.log import get_logger
from loopx.model import utcnow
from loopx.registry.goals import open_gate
from loopx.turn.steps.context import Stop, StopKind, TurnContext
from loopx.turn.workdir import acquire_workdir, note_waiting, release_workdir, turn_workdir
from loopx.worktree.creation import turn_goal

log = get_logger(__name__)


def hold_workdir(ctx: TurnContext) -> TurnContext | Stop:
    """Take the lock of the goal's workdir, or stop: another goal's turn holds it."""
    workdir = turn_workdir(ctx.layout, ctx.goal)
    now = utcnow()
    lease = ctx.claimed.lease
    taken = acquire_workdir(ctx.layout, workdir, lease, now=now, grace_s=ctx.config.lease_grace_s)
    if taken.hold is not None:
        return ctx.but(workdir=taken.hold)
    busy_with = None
    if taken.blocking is not None:
        log.info("workdir_busy", holder=taken.blocking.goal_id, path=taken.blocking.path)
        note_waiting(ctx.layout, ctx.goal.id, workdir, taken.blocking, now=now)
        busy_with = taken.blocking.goal_id
    return Stop(StopKind.WAIT, "workdir_busy", claimed=False, workdir_busy=busy_with)


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
    try:
        return ctx.but(goal=turn_goal(ctx.layout, goal, ctx.fence))
    except (WorktreeError, GitError) as e:
        log.warning("worktree_failed", error=e.message)
        hint = f" ({e.hint})" if e.hint else ""
        open_gate(
            ctx.layout,
            goal.id,
            f"the goal's git worktree could not be made: {e.message}{hint}. "
            "Fix it and answer this gate; the next claim tries again",
            now=utcnow(),
            opened_by="worktree",
        )
        return Stop(StopKind.GATE, "worktree")
