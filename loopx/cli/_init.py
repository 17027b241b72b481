"""`loopx init`."""

from __future__ import annotations

import argparse
from typing import Any

from loopx import exitcodes
from loopx.cli._common import add_command, print_json, resolved
from loopx.registry.model import init_registry
from loopx.root import open_root


def register(sub: Any) -> None:
    """Add `init`."""
    parser = add_command(sub, "init", help="create the runtime root and an empty registry")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Create the root (0700) and the registry if missing; idempotent."""
    where = resolved(args)
    layout = open_root(where, create=True)
    created, registry = init_registry(layout)
    goals = len(registry.goals)
    if args.json:
        print_json(
            {
                "schema_version": 1,
                "root": str(layout.root),
                "registry": str(layout.registry),
                "root_source": str(where.source),
                "registry_created": created,
                "goals": goals,
            }
        )
    else:
        verb = "initialised" if created else "already initialised"
        print(f"{verb}: runtime root {layout.root} (registry {layout.registry}, {goals} goals)")
    return exitcodes.OK
