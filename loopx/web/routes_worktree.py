"""``/api/goals/<id>/worktree``: a worktree goal's branch, diff, merge and whether it waits to merge.

Served under the same :class:`~loopx.web.app.Guard` (Host allow-list, token) as
every other data route, from the server's :class:`~loopx.web.worktrees.WorktreeStates`
(git is asked again only when the goal's files changed, or after a while).
"""

from __future__ import annotations

from http import HTTPStatus

from starlette.requests import Request
from starlette.responses import Response

from loopx.web.replies import (
    error_reply,
    handled,
    json_reply,
    known_goal,
    no_such_goal,
    service_of,
    worktree_states,
)


@handled
def api_worktree(request: Request) -> Response:
    """``/api/goals/<id>/worktree``: 404 for an unknown goal or one without a worktree."""
    goal_id = known_goal(request)
    if goal_id is None:
        return no_such_goal(request)
    service = service_of(request)
    goal = service.goal_policy(goal_id)
    if goal is None or goal.worktree is None:
        return error_reply(
            HTTPStatus.NOT_FOUND,
            f"goal {goal_id!r} has no worktree: its turns run in its workdir",
            hint=f"give it one with `loopx goal add {goal_id} --update --worktree`",
        )
    snap = service.snapshot()
    view = snap.projection.goals[snap.by_id[goal_id]]
    return json_reply(worktree_states(request).state(goal, view))
