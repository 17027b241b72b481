"""`loopx archive GOAL`: move a goal's files to archived-goals/ and mark it archived."""

from __future__ import annotations

import argparse
from typing import Any

from loopx import exitcodes
from loopx.cli._common import add_command, print_json, root


def register(sub: Any) -> None:
    """Add `archive`."""
    parser = add_command(sub, "archive", help="move a goal's files aside and mark it archived")
    parser.add_argument("goal_id", metavar="GOAL")
    parser.add_argument(
        "--dry-run", action="store_true", help="print the destination, change nothing"
    )
    parser.add_argument(
        "--archive-root", metavar="DIR", help="archive here (default: <root>/archived-goals)"
    )
    parser.add_argument(
        "--allow-registered", action="store_true", help="archive even an active registered goal"
    )
    parser.add_argument(
        "--copy",
        action="store_true",
        help="copy then delete when the archive is on another filesystem",
    )
    parser.add_argument("--json", action="store_true")
    parser.set_defaults(func=run_archive)


def run_archive(args: argparse.Namespace) -> int:
    """Archive one goal and print a Markdown summary (or JSON)."""
    result = root(args).goals.archive(
        args.goal_id,
        archive_root=args.archive_root,
        allow_registered=args.allow_registered,
        dry_run=args.dry_run,
        copy=args.copy,
    )
    if args.json:
        print_json(result)
    else:
        print(result.summary_markdown, end="")
    return exitcodes.OK
