"""`loopx init [--upgrade]`."""

from __future__ import annotations

import argparse
from typing import Any

from loopx import exitcodes
from loopx.cli._common import add_command, print_json, resolved
from loopx.registry.catalog import init_registry
from loopx.registry.migrate import migrate_registry
from loopx.root import open_root


def register(sub: Any) -> None:
    """Add `init`."""
    parser = add_command(sub, "init", help="create the runtime root and an empty registry")
    parser.add_argument(
        "--upgrade",
        action="store_true",
        help="move an old single-file registry's goals into one file per goal "
        "(also done on the first open of such a root)",
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Create the root (0700) and the registry if missing; idempotent."""
    where = resolved(args)
    layout = open_root(where, create=True)
    migration = migrate_registry(layout) if args.upgrade else None
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
                "migrated_goals": migration.goals if migration is not None else 0,
            }
        )
    else:
        verb = "initialised" if created else "already initialised"
        print(f"{verb}: runtime root {layout.root} (registry {layout.registry}, {goals} goals)")
        if migration is not None and migration.migrated:
            print(
                f"upgraded: {migration.goals} goals moved to goals/<id>/goal.json "
                f"(old registry kept as {migration.backup})"
            )
    return exitcodes.OK
