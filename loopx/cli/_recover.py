"""`loopx recover`: finish or quarantine every unfinished turn journal of the root."""

from __future__ import annotations

import argparse
from typing import Any

from loopx import exitcodes
from loopx.cli._common import add_command, print_json, root


def register(sub: Any) -> None:
    """Add `recover`."""
    parser = add_command(sub, "recover", help="finish interrupted turns from their journals")
    parser.add_argument("--json", action="store_true")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Recover the root; exit 1 when something needs a human (quarantine or error)."""
    report = root(args).turns.recover()
    if args.json:
        print_json(report)
    else:
        for action in report.actions:
            print(f"{action.turn_key}: {action.decision} -> {action.status or 'quarantined'}")
        for path in report.quarantined:
            print(f"QUARANTINED {path} (see the .reason.json beside it)")
        for key in report.retry_pending:
            print(f"{key}: host will run again at the goal's next claim")
        for goal_id in report.busy_goals:
            print(f"{goal_id}: skipped, a live agent holds its lease")
        for error in report.errors:
            print(f"ERROR {error}")
        if not (report.actions or report.busy_goals or report.errors):
            print("nothing to recover")
    return exitcodes.OK if report.clean else exitcodes.FAILURE
