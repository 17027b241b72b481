"""What `loopx goal ...` and `loopx gate ...` print with ``--json``: typed documents."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from loopx.model import Record
from loopx.registry.catalog import load_registry
from loopx.registry.goalrecords import Goal
from loopx.root import Layout
from loopx.state import Gate, GoalState, HostSession, load_state


class GoalDocument(Record):
    """`goal add|pause|resume|done|reopen --json`: the goal as registered now."""

    schema_version: Literal[1] = 1
    goal: Goal
    repeated: bool = False  # pause, resume, done, reopen: the goal already was so; nothing written
    # Other goals on the same workdir (or one inside or above it), when this goal
    # has no worktree of its own: their turns run one at a time.
    shared_workdir: list[str] = Field(default_factory=list)


class GoalList(Record):
    """`goal list --json`: every registered goal, highest priority first, then by id."""

    schema_version: Literal[1] = 1
    goals: list[Goal]


class GoalView(Record):
    """`goal show --json`: one goal's policy and its state."""

    schema_version: Literal[1] = 1
    goal: Goal
    state: GoalState


class SessionReset(Record):
    """`goal reset-session --json`: the host session dropped (None when there was none)."""

    schema_version: Literal[1] = 1
    goal_id: str
    dropped: HostSession | None


class GateDocument(Record):
    """`gate open|resolve --json`: the gate as it is now."""

    schema_version: Literal[1] = 1
    goal_id: str
    gate: Gate


def goal_list(layout: Layout) -> GoalList:
    """Every registered goal, highest priority first, then by id."""
    goals = load_registry(layout).goals.values()
    return GoalList(goals=sorted(goals, key=lambda g: (-g.priority, g.id)))


def goal_view(layout: Layout, goal: Goal) -> GoalView:
    """``goal`` with its state (a fresh state when it has not run yet)."""
    return GoalView(goal=goal, state=load_state(layout, goal.id))
