"""`loopx schema NAME`."""

from __future__ import annotations

import argparse
import json
import sys

from loopx import exitcodes
from loopx.api import Root
from loopx.cli._common import Subparsers, add_command


def register(sub: Subparsers) -> None:
    """Add `schema`."""
    parser = add_command(
        sub, "schema", help="print the JSON Schema of a file kind or a --json output"
    )
    parser.add_argument("name", metavar="NAME", help=f"one of: {', '.join(Root.schema_names())}")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print the JSON Schema of the named model."""
    sys.stdout.write(json.dumps(Root.schema(args.name), indent=2) + "\n")
    return exitcodes.OK
