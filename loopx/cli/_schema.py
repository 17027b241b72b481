"""`loopx schema NAME`."""

from __future__ import annotations

import argparse
from typing import Any

from loopx import exitcodes
from loopx.cli._common import add_command, print_json
from loopx.schemas import SCHEMAS, schema_model


def register(sub: Any) -> None:
    """Add `schema`."""
    parser = add_command(sub, "schema", help="print the JSON Schema of a file kind")
    parser.add_argument("name", metavar="NAME", help=f"one of: {', '.join(sorted(SCHEMAS))}")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print the JSON Schema of the named model."""
    print_json(schema_model(args.name).model_json_schema())
    return exitcodes.OK
