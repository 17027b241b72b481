"""`loopx agent run --agent-id A [--max-turns N] [--once]`: one agent loop in this process."""

from __future__ import annotations

import argparse

from loopx.cli._common import Subparsers, add_command, root


def register(sub: Subparsers) -> None:
    """Add the `agent` commands."""
    agent = add_command(sub, "agent", help="run an agent worker (the supervisor starts these)")
    actions = agent.add_subparsers(dest="action", metavar="ACTION", required=True)
    run = add_command(actions, "run", help="heartbeat, select, turn, repeat until stopped")
    add_agent_run_options(run)
    run.set_defaults(func=run_agent_command)


def add_agent_run_options(parser: argparse.ArgumentParser) -> None:
    """The options of `python -m loopx.agents run` (tests/test_cli_start.py keeps them equal)."""
    parser.add_argument("--agent-id", required=True, metavar="ID", help="this agent's id")
    parser.add_argument("--max-turns", type=int, metavar="N", help="exit after N turns")
    parser.add_argument(
        "--once", action="store_true", help="one step (at most one turn), then exit"
    )
    parser.add_argument(
        "--heartbeat-seconds", type=float, default=2.0, metavar="S", help="heartbeat period"
    )
    parser.add_argument(
        "--idle-max-seconds", type=float, default=2.0, metavar="S", help="longest idle sleep"
    )
    parser.add_argument("--parent-pid", type=int, metavar="PID", help="stop when PID is gone")
    parser.add_argument(
        "--parent-started-at", type=float, metavar="T", help="psutil create_time of --parent-pid"
    )


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
