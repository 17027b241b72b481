"""`loopx journal list GOAL`, `loopx journal inspect GOAL TURN_KEY`."""

from __future__ import annotations

import argparse
from typing import Any

from loopx import exitcodes
from loopx.cli._common import add_command, print_json, root


def register(sub: Any) -> None:
    """Add the `journal` commands."""
    journal = add_command(sub, "journal", help="list and inspect turn journals")
    actions = journal.add_subparsers(dest="action", metavar="ACTION", required=True)
    lister = add_command(actions, "list", help="every journal of a goal with its projection")
    lister.add_argument("goal_id", metavar="GOAL")
    lister.add_argument("--json", action="store_true")
    lister.set_defaults(func=run_list)
    one = add_command(actions, "inspect", help="one journal's projection and recovery decision")
    one.add_argument("goal_id", metavar="GOAL")
    one.add_argument("turn_key", metavar="TURN_KEY")
    one.add_argument("--json", action="store_true")
    one.set_defaults(func=run_inspect)


def run_list(args: argparse.Namespace) -> int:
    """List a goal's journals, oldest first."""
    listed = root(args).turns.journals(args.goal_id)
    if args.json:
        print_json(listed)
        return exitcodes.OK
    views = listed.journals
    if not views:
        print(f"goal {args.goal_id} has no turn journals yet")
    for v in views:
        bad = f"  {len(v.violations)} violation(s)" if v.violations else ""
        print(f"{v.turn_key}  {v.status or '?':<11}  {v.recovery_decision:<10}{bad}")
    return exitcodes.OK


def run_inspect(args: argparse.Namespace) -> int:
    """Print one journal's projection."""
    view = root(args).turns.inspect(args.goal_id, args.turn_key)
    if args.json:
        print_json(view)
        return exitcodes.OK
    print(f"{view.turn_key}: status {view.status}, decision {view.recovery_decision}")
    print(f"  phases: {', '.join(view.completed_phases) or '-'}")
    print(f"  replay_legal={view.replay_legal} journal_consistent={view.journal_consistent}")
    for violation in view.violations:
        print(f"  VIOLATION {violation.code}: {violation.message}")
    return exitcodes.OK
