"""`loopx turn run-once GOAL`: exactly one turn in this process."""

from __future__ import annotations

import argparse

from loopx import exitcodes
from loopx.cli._common import Subparsers, add_command, print_json, root
from loopx.turn.outcome import TurnStatus


def register(sub: Subparsers) -> None:
    """Add the `turn` commands."""
    turn = add_command(sub, "turn", help="run turns by hand")
    actions = turn.add_subparsers(dest="action", metavar="ACTION", required=True)
    once = add_command(actions, "run-once", help="claim the goal, run one turn, release")
    once.add_argument("goal_id", metavar="GOAL")
    once.add_argument("--agent-id", default="cli", metavar="A", help="agent id (default: cli)")
    once.add_argument("--json", action="store_true", help="print the turn attempt as JSON")
    once.set_defaults(func=run_once)


def run_once(args: argparse.Namespace) -> int:
    """Run one turn; exit 0 committed, 1 failed/stopped, 3 not run (leased or quota)."""
    attempt = root(args).turns.run_one(args.goal_id, agent_id=args.agent_id)
    report = attempt.report
    if args.json:
        print_json(attempt)
    elif attempt.workdir_busy is not None:  # one turn per workdir
        print(
            f"{args.goal_id}: not run, workdir busy: goal {attempt.workdir_busy} runs a turn there"
        )
    elif not attempt.claimed:
        print(f"{args.goal_id}: not run, leased by {attempt.blocking_agent}")
    elif report is None:
        reason = attempt.quota.message if attempt.quota else "stop requested"
        print(f"{args.goal_id}: not run: {reason}")
    else:
        what = report.kind or (report.failure.reason if report.failure else "")
        line = f"{report.turn_key}: {report.status} {what}".rstrip()
        if report.failure:
            line += f": {report.failure.message}"
        elif report.summary:
            line += f": {report.summary}"
        print(line)
    if report is None:
        return exitcodes.NOT_ALLOWED
    return exitcodes.OK if report.status is TurnStatus.COMMITTED else exitcodes.FAILURE
