"""`loopx gate open|resolve`."""

from __future__ import annotations

import argparse
from typing import Any

from loopx import exitcodes
from loopx.cli._common import add_command, print_json, root


def register(sub: Any) -> None:
    """Add `gate open` and `gate resolve`."""
    gate = add_command(sub, "gate", help="open or resolve a human gate on a goal")
    actions = gate.add_subparsers(dest="action", metavar="ACTION", required=True)

    opener = add_command(actions, "open", help="ask a human a question; the goal waits")
    opener.add_argument("goal_id", metavar="ID")
    opener.add_argument("--question", required=True, metavar="TEXT")
    opener.add_argument("--json", action="store_true")
    opener.set_defaults(func=run_open)

    resolver = add_command(actions, "resolve", help="answer the goal's oldest open gate")
    resolver.add_argument("goal_id", metavar="ID")
    resolver.add_argument("--answer", required=True, metavar="TEXT")
    resolver.add_argument("--gate", type=int, metavar="N", help="answer gate N instead")
    resolver.add_argument("--json", action="store_true")
    resolver.set_defaults(func=run_resolve)


def run_open(args: argparse.Namespace) -> int:
    """Open a gate."""
    document = root(args).gates.open(args.goal_id, question=args.question)
    gate = document.gate
    if args.json:
        print_json(document)
    else:
        print(f"{args.goal_id}: gate {gate.id} open: {gate.question}")
    return exitcodes.OK


def run_resolve(args: argparse.Namespace) -> int:
    """Resolve a gate."""
    document = root(args).gates.resolve(args.goal_id, answer=args.answer, gate=args.gate)
    gate = document.gate
    if args.json:
        print_json(document)
    else:
        print(f"{args.goal_id}: gate {gate.id} resolved")
    return exitcodes.OK
