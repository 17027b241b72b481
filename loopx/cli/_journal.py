"""`loopx journal list GOAL`, `loopx journal inspect GOAL TURN_KEY`."""

from __future__ import annotations

import argparse
from typing import Any

from loopx import exitcodes
from loopx.cli._common import add_command, layout, print_json
from loopx.errors import LoopxError, UsageError
from loopx.ids import is_valid_goal_id
from loopx.registry.goals import get_goal
from loopx.turn.journal import journal_path
from loopx.turn.recovery import inspect_file, inspect_goal_journals


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
    where = layout(args)
    get_goal(where, args.goal_id)
    listed = inspect_goal_journals(where, args.goal_id)
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
    where = layout(args)
    if not is_valid_goal_id(args.turn_key):  # turn keys follow the goal id rule
        raise UsageError(
            f"invalid turn key {args.turn_key!r}: not a single safe path segment",
            hint=f"list the goal's turn keys with `loopx journal list {args.goal_id}`",
        )
    path = journal_path(where, args.goal_id, args.turn_key)
    try:
        view = inspect_file(path, goal_id=args.goal_id)
    except FileNotFoundError:
        raise LoopxError(
            f"no journal {args.turn_key!r} for goal {args.goal_id!r} ({path})",
            hint=f"list them with `loopx journal list {args.goal_id}`",
        ) from None
    if args.json:
        print_json(view)
        return exitcodes.OK
    print(f"{view.turn_key}: status {view.status}, decision {view.recovery_decision}")
    print(f"  phases: {', '.join(view.completed_phases) or '-'}")
    print(f"  replay_legal={view.replay_legal} journal_consistent={view.journal_consistent}")
    for violation in view.violations:
        print(f"  VIOLATION {violation.code}: {violation.message}")
    return exitcodes.OK
