"""`loopx agent run --agent-id A [--max-turns N] [--once]`: one agent loop in this process."""

from __future__ import annotations

import argparse

from loopx.api import add_agent_run_options
from loopx.cli._common import Subparsers, add_command, root


def register(sub: Subparsers) -> None:
    """Add the `agent` commands."""
    agent = add_command(sub, "agent", help="run an agent worker (the supervisor starts these)")
    actions = agent.add_subparsers(dest="action", metavar="ACTION", required=True)
    run = add_command(actions, "run", help="heartbeat, select, turn, repeat until stopped")
    add_agent_run_options(run)
    run.set_defaults(func=run_agent_command)


def run_agent_command(args: argparse.Namespace) -> int:
    """Run the agent loop until stopped, --max-turns or --once."""
    return root(args).fleet.run_agent(
        agent_id=args.agent_id,
        max_turns=args.max_turns,
        once=args.once,
        heartbeat_s=args.heartbeat_seconds,
        idle_max_s=args.idle_max_seconds,
        parent_pid=args.parent_pid,
        parent_started_at=args.parent_started_at,
    )
