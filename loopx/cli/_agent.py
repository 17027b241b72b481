"""`loopx agent run --agent-id A [--max-turns N] [--once]`: one agent loop in this process."""

from __future__ import annotations

import argparse

from loopx.cli._common import Subparsers, add_command, layout


def register(sub: Subparsers) -> None:
    """Add the `agent` commands."""
    from loopx.agents.__main__ import add_agent_options  # noqa: PLC0415 - the one option list

    agent = add_command(sub, "agent", help="run an agent worker (the supervisor starts these)")
    actions = agent.add_subparsers(dest="action", metavar="ACTION", required=True)
    run = add_command(actions, "run", help="heartbeat, select, turn, repeat until stopped")
    add_agent_options(run)
    run.set_defaults(func=run_agent_command)


def run_agent_command(args: argparse.Namespace) -> int:
    """Run the agent loop until stopped, --max-turns or --once."""
    from loopx.agents.__main__ import config_of  # noqa: PLC0415
    from loopx.agents.loop import run_agent  # noqa: PLC0415

    return run_agent(layout(args), config_of(args))
