"""The sandbox steps: open the turn's sandbox before its host, close it at the turn's end.

A turn whose plan names a sandbox (the goal's ``--sandbox bwrap`` when the
turn was planned, so a goal changed meanwhile never changes a turn in
flight) runs its host and its done-check inside it. Opening it prepares
what both need: the scratch folders and the network proxy the agent serves
outside (:class:`~loopx.turn.steps.context.TurnProcesses.open_sandbox`).
It holds nothing durable, so it runs at every claim that resumes the turn
before its check, and the ``close_sandbox`` row, which runs however the
turn ends, stops the proxy. What the proxy saw is in the journal's host
outcome (``network``).
"""

from __future__ import annotations

from loopx.log import get_logger
from loopx.turn.steps.context import TurnContext

log = get_logger(__name__)


def sandboxed(ctx: TurnContext) -> bool:
    """Whether the turn's plan runs it sandboxed (the row applies)."""
    return ctx.journal is not None and ctx.journal.plan.sandbox is not None


def open_sandbox(ctx: TurnContext) -> TurnContext:
    """The context holding the turn's open sandbox."""
    handle = ctx.processes.open_sandbox(ctx)
    log.debug("sandbox_opened", turn_key=ctx.planned.turn_key)
    return ctx.but(sandbox=handle)


def has_sandbox(ctx: TurnContext) -> bool:
    """Whether a sandbox is open (the closing row applies)."""
    return ctx.sandbox is not None


def close_sandbox(ctx: TurnContext) -> TurnContext:
    """Stop the proxy, remove the scratch."""
    assert ctx.sandbox is not None  # noqa: S101 - the row applies only then
    ctx.sandbox.close()
    return ctx.but(sandbox=None)
