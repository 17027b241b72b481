"""``--autonomy full`` inside LoopX's sandbox: each CLI's own flags to run with every permission.

A sandboxed goal (``--sandbox bwrap``) that says ``--autonomy full`` runs its
CLI without the CLI's own approvals and sandbox: LoopX's sandbox is the
boundary, and each CLI's own sandbox nested inside bubblewrap either fails
or confines nothing more (docs/hosts.md, "Inside LoopX's sandbox"). The
flags go right after the program (and codex's ``exec``), before any
``resume`` or prompt argument. Outside a sandbox the flags are never added.
"""

from __future__ import annotations

from typing import Final

from loopx.agents.hosts.base import HostInvocation
from loopx.registry.goalrecords import Goal

# kind -> (where the flags go in argv, the flags, the environment they need)
FULL_AUTONOMY: Final[dict[str, tuple[int, tuple[str, ...], dict[str, str]]]] = {
    "codex": (2, ("--dangerously-bypass-approvals-and-sandbox",), {}),
    # Claude Code refuses the flag as root unless told it runs in a sandbox.
    "claude": (1, ("--dangerously-skip-permissions",), {"IS_SANDBOX": "1"}),
    "gemini": (1, ("--approval-mode", "yolo"), {}),
}


def with_autonomy(goal: Goal, invocation: HostInvocation) -> HostInvocation:
    """The invocation with the CLI's every-permission flags, when the goal asks and is sandboxed."""
    box = goal.sandbox
    entry = FULL_AUTONOMY.get(goal.host.kind)
    if box is None or box.autonomy != "full" or entry is None:
        return invocation
    at, flags, env = entry
    argv = list(invocation.argv)
    if any(flag in argv for flag in flags):
        return invocation
    argv[at:at] = flags
    return invocation.model_copy(update={"argv": argv, "env": {**invocation.env, **env}})
