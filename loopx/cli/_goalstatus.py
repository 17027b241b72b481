"""`loopx goal pause|resume|done|reopen`: a goal's status, as a person changes it."""

from __future__ import annotations

import argparse

from loopx import exitcodes
from loopx.cli._common import Subparsers, add_command, print_json, root
from loopx.errors import UsageError


def register_status(actions: Subparsers) -> None:
    """Add `goal pause`, `resume`, `done` and `reopen`."""
    for name, text in (
        ("pause", "stop scheduling a goal (refused on a done goal)"),
        ("resume", "schedule a paused goal again (refused on a done goal)"),
        ("done", "mark a goal done"),
        ("reopen", "make a done goal active again: its agents run more turns (needs --yes)"),
    ):
        action = add_command(actions, name, help=text)
        action.add_argument("goal_id", metavar="ID")
        if name == "reopen":
            action.add_argument(
                "--yes", action="store_true", help="confirm: the finished goal runs again"
            )
        action.add_argument("--json", action="store_true")
        action.set_defaults(func=run_status, request=name)


def run_status(args: argparse.Namespace) -> int:
    """Pause, resume, finish or reopen a goal."""
    goals = root(args).goals
    if args.request == "reopen" and not args.yes:
        raise UsageError(
            f"reopening goal {args.goal_id} runs finished work again (new turns, new cost); "
            "nothing changed",
            hint=f"confirm with `loopx goal reopen {args.goal_id} --yes`",
        )
    change = {
        "pause": goals.pause,
        "resume": goals.resume,
        "done": goals.done,
        "reopen": goals.reopen,
    }[args.request]
    document = change(args.goal_id)
    goal = document.goal
    if args.json:
        print_json(document)
    elif document.repeated:
        print(f"goal {goal.id} already is {goal.status}; nothing changed")
    else:
        print(f"goal {goal.id} is now {goal.status}")
    return exitcodes.OK
