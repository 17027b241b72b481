"""`loopx schema NAME`."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from loopx import exitcodes
from loopx.cli._common import add_command
from loopx.schemas import SCHEMAS, schema_model


def register(sub: Any) -> None:
    """Add `schema`."""
    parser = add_command(
        sub, "schema", help="print the JSON Schema of a file kind or a --json output"
    )
    parser.add_argument("name", metavar="NAME", help=f"one of: {', '.join(sorted(SCHEMAS))}")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print the JSON Schema of the named model."""
    sys.stdout.write(json.dumps(schema_model(args.name).model_json_schema(), indent=2) + "\n")
    return exitcodes.OK
