"""What a person may do to a goal's status: pause, resume, mark done, reopen.

Finished work is protected. A done goal is neither paused nor resumed: a
resume would run another turn of finished work (new cost, new commits, a
second "done"), and a pause of a finished goal only sets up that resume. Only
an explicit reopen makes a done goal active again. The rules, in order:

1. an archived goal changes no more (register it again under a new id);
2. the status asked for is the goal's already: nothing is written (``repeated``);
3. pause or resume of a done goal is refused, naming ``loopx goal reopen``;
4. reopen of a goal that is not done is refused (a paused one is resumed);
5. otherwise the goal takes the status asked for.

The CLI (``loopx goal pause|resume|done|reopen``), the Python API and the
dashboard's actions all go through :func:`change_status`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Final

from loopx.errors import GoalNotFoundError, GoalStateError
from loopx.ids import validate_goal_id
from loopx.registry.goalrecords import Goal, GoalStatus
from loopx.registry.goals import get_goal
from loopx.registry.store import update_goal
from loopx.root import Layout


class StatusRequest(StrEnum):
    """A status change a person asks for."""

    PAUSE = "pause"
    RESUME = "resume"
    DONE = "done"
    REOPEN = "reopen"


_TARGET: Final = {
    StatusRequest.PAUSE: GoalStatus.PAUSED,
    StatusRequest.RESUME: GoalStatus.ACTIVE,
    StatusRequest.DONE: GoalStatus.DONE,
    StatusRequest.REOPEN: GoalStatus.ACTIVE,
}


class GoalDoneError(GoalStateError):
    """Pause or resume of a done goal: finished work runs again only by an explicit reopen."""

    def __init__(self, goal_id: str, request: StatusRequest) -> None:
        self.goal_id, self.request = goal_id, request
        super().__init__(
            f"goal {goal_id} is done; `loopx goal reopen {goal_id}` runs it again",
            hint=f"nothing changed; a {request.value} would run finished work (new turns, new cost)",
        )

    def __reduce__(self) -> tuple[object, ...]:
        return type(self), (self.goal_id, self.request)


class NotDoneError(GoalStateError):
    """Reopen of a goal that is not done; nothing changed."""

    def __init__(self, goal_id: str, status: GoalStatus) -> None:
        self.goal_id, self.status = goal_id, status
        hint = (
            f"`loopx goal resume {goal_id}` schedules a paused goal again"
            if status is GoalStatus.PAUSED
            else None
        )
        super().__init__(
            f"goal {goal_id} is {status.value}, not done: nothing to reopen", hint=hint
        )

    def __reduce__(self) -> tuple[object, ...]:
        return type(self), (self.goal_id, self.status)


@dataclass(frozen=True, slots=True)
class StatusChange:
    """How a status request ended: the goal now, and whether it already was so."""

    goal: Goal
    repeated: bool  # the goal already had this status: nothing was written


def target_status(goal_id: str, current: GoalStatus, request: StatusRequest) -> GoalStatus:
    """The status ``request`` gives a goal that is ``current`` now. Pure.

    Raises:
        GoalStateError: the goal is archived.
        GoalDoneError: pause or resume of a done goal.
        NotDoneError: reopen of a goal that is not done (and not already active).
    """
    target = _TARGET[request]
    if current is GoalStatus.ARCHIVED:
        raise GoalStateError(
            f"goal {goal_id!r} is archived",
            hint="register it again under a new id with `loopx goal add`",
        )
    if current is target:
        return target
    if current is GoalStatus.DONE and request in {StatusRequest.PAUSE, StatusRequest.RESUME}:
        raise GoalDoneError(goal_id, request)
    if request is StatusRequest.REOPEN and current is not GoalStatus.DONE:
        raise NotDoneError(goal_id, current)
    return target


def change_status(
    layout: Layout, goal_id: str, request: StatusRequest, *, now: datetime
) -> StatusChange:
    """Apply ``request`` to the goal under its lock, by the rules above.

    Raises:
        GoalNotFoundError: no such goal.
        GoalStateError: the goal is archived, or the rules refuse the request
            (:class:`GoalDoneError`, :class:`NotDoneError`); nothing changed.
    """
    validate_goal_id(goal_id)
    before = get_goal(layout, goal_id)
    if target_status(goal_id, before.status, request) is before.status:
        return StatusChange(goal=before, repeated=True)

    def change(goal: Goal | None) -> Goal:
        if goal is None:
            raise GoalNotFoundError(goal_id, layout.registry)
        status = target_status(goal_id, goal.status, request)  # judged again under the lock
        return goal.model_copy(update={"status": status, "updated_at": now})

    return StatusChange(goal=update_goal(layout, goal_id, change), repeated=False)
