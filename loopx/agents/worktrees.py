"""Running a ``--worktree`` goal's turn in its worktree: made on the first claim, a gate if it cannot be."""

from __future__ import annotations

from loopx.errors import GitError, WorktreeError
from loopx.log import get_logger
from loopx.model import utcnow
from loopx.registry.goals import open_gate
from loopx.registry.model import Goal
from loopx.root import Layout
from loopx.turn.lease import Fence
from loopx.worktree.creation import turn_goal

log = get_logger(__name__)


def goal_in_worktree(layout: Layout, goal: Goal, fence: Fence) -> Goal | None:
    """The goal with ``workdir`` its worktree (made now if need be); the goal itself without one.

    None: the worktree cannot be made (the repository or its base is gone, git refused);
    a gate on the goal says why, and no turn runs until a person answers it.

    Raises:
        LeaseLostError: the claim was taken over.
    """
    try:
        return turn_goal(layout, goal, fence)
    except (WorktreeError, GitError) as e:
        log.warning("worktree_failed", error=e.message)
        hint = f" ({e.hint})" if e.hint else ""
        open_gate(
            layout,
            goal.id,
            f"the goal's git worktree could not be made: {e.message}{hint}. "
            "Fix it and answer this gate; the next claim tries again",
            now=utcnow(),
            opened_by="worktree",
        )
        return None
