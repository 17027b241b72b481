"""The leftovers step: finish what an earlier attempt at this goal's turn left.

A turn never starts while an older one is open. The goal's newest journal,
if it is not a tombstone, is recovered (:func:`loopx.turn.recovery.recover_goal`);
if it is, the run log a power cut lost is written again from it
(:func:`loopx.turn.writeback.restore_run_log`):

* resumable (its host finished): its phases are completed from the journal,
  and this claim goes on to a new turn if the quota allows;
* waiting for its done-check, or for a host retry: it becomes this claim's
  journal, and the table resumes it at the first step it has not recorded
  (the check, or the host again under the same turn key with ``attempt`` + 1).
  Every process still working for the goal is killed first: the earlier
  holder's host or check must be gone before this claim runs one.
"""

from __future__ import annotations

from loopx.errors import GoalNotFoundError
from loopx.ids import validate_goal_id
from loopx.model import utcnow
from loopx.registry.goalrecords import Goal
from loopx.root import Layout
from loopx.schedule.candidates import read_goal_cached
from loopx.turn.journal import newest_journal
from loopx.turn.recovery import recover_goal
from loopx.turn.steps.context import TurnContext
from loopx.turn.writeback import restore_run_log


def finish_leftovers(ctx: TurnContext) -> TurnContext:
    """Recover the goal's newest journal; keep it as this turn's when it waits for a process.

    Raises:
        GoalNotFoundError: the goal was removed meanwhile.
        LeaseLostError: the claim was taken over.
    """
    layout, goal_id = ctx.layout, ctx.goal.id
    newest = newest_journal(layout, goal_id)
    actions, pending = recover_goal(
        layout, goal_id, ctx.fence, now=utcnow(), paths=[newest] if newest is not None else []
    )
    if pending is not None:
        ctx.processes.kill_stale(layout, goal_id)
    elif newest is not None:
        restore_run_log(layout, newest)
    # Finishing a turn may have changed the goal (done, paused by its account).
    return ctx.but(goal=read_goal(layout, goal_id), recovered=tuple(actions), journal=pending)


def read_goal(layout: Layout, goal_id: str) -> Goal:
    """:func:`loopx.registry.goals.get_goal`, parsing the goal file again only when it changed.

    Raises:
        GoalNotFoundError: no such goal.

    """
    goal = read_goal_cached(layout, validate_goal_id(goal_id))
    if goal is None:
        raise GoalNotFoundError(goal_id, layout.registry)
    return goal
