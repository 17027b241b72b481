"""The agent's command-line options, declared once.

``python -m loopx.agents run`` (the process the supervisor starts) and
``loopx agent run`` (the same loop in the CLI's process, through
``loopx.api``) both add these. Standard library only: every CLI start that
parses ``agent`` imports it.
"""

from __future__ import annotations

import argparse


def add_agent_run_options(parser: argparse.ArgumentParser) -> None:
    """``--agent-id``, ``--max-turns``, ``--once``, the two periods and the parent to watch."""
    parser.add_argument("--agent-id", required=True, metavar="ID", help="this agent's id")
    parser.add_argument("--max-turns", type=int, metavar="N", help="exit after N turns")
    parser.add_argument(
        "--once", action="store_true", help="one step (at most one turn), then exit"
    )
    parser.add_argument(
        "--heartbeat-seconds", type=float, default=2.0, metavar="S", help="heartbeat period"
    )
    parser.add_argument(
        "--idle-max-seconds",
        type=float,
        default=2.0,
        metavar="S",
        help="longest idle sleep while a goal is eligible but lost, or another agent holds a lease",
    )
    parser.add_argument("--parent-pid", type=int, metavar="PID", help="stop when PID is gone")
    parser.add_argument(
        "--parent-started-at", type=float, metavar="T", help="psutil create_time of --parent-pid"
    )
