"""`goal add`'s hand-off options (docs/work.md, "Hand-off between accounts")."""

from __future__ import annotations

import argparse
from typing import Any


def add_handoff_options(add: argparse.ArgumentParser) -> None:
    """`--fallback-account`, `--no-fallback-accounts`, `--[no-]handoff`, `--max-handoffs-per-day`."""
    add.add_argument(
        "--fallback-account",
        action="append",
        metavar="NAME",
        help="an account (any host kind) its turns hand off to while its own does not admit "
        "them; repeatable, tried in order; replaces the list with --update (docs/work.md)",
    )
    add.add_argument(
        "--no-fallback-accounts",
        action="store_true",
        help="forget the goal's fallback accounts (with --update)",
    )
    add.add_argument(
        "--no-handoff",
        dest="handoff",
        action="store_false",
        default=None,
        help="pin the goal to its own account: never hand a turn off",
    )
    add.add_argument(
        "--handoff", dest="handoff", action="store_true", help="allow hand-off again (--update)"
    )
    add.add_argument(
        "--max-handoffs-per-day",
        type=int,
        metavar="N",
        help="handed-off turns in any 24 hours (default 24; -1: no cap)",
    )


def handoff_arguments(args: argparse.Namespace) -> dict[str, Any]:
    """The hand-off keywords of ``root.goals.add`` from the parsed flags."""
    return {
        "fallback_accounts": [] if args.no_fallback_accounts else args.fallback_account,
        "handoff": args.handoff,
        "max_handoffs_per_day": args.max_handoffs_per_day,
    }
