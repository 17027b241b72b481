"""The merge step: a ``--auto-merge`` goal that a turn made done is merged into its base.

It runs after the release: the merge takes the repository's own lock, and
runs the goal's done-check on the merged tree first (a process: the agent's
side runs it, :meth:`~loopx.turn.steps.context.TurnProcesses.merge`). A merge
that cannot start opens a gate saying so; the goal stays done.
"""

from __future__ import annotations

from loopx.turn.steps.context import TurnContext


def auto_merges(ctx: TurnContext) -> bool:
    """Whether the goal merges its branch by itself once done (the row applies)."""
    return ctx.goal.auto_merge


def merge_when_done(ctx: TurnContext) -> TurnContext:
    """Merge the goal's branch if the turn made the goal done (else nothing)."""
    ctx.processes.merge(ctx.layout, ctx.goal.id)
    return ctx
