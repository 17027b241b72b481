"""`loopx init [--upgrade]`."""

from __future__ import annotations

import argparse

from loopx import exitcodes
from loopx.api import Root
from loopx.cli._common import Subparsers, add_command, print_json
from loopx.cli._sandbox import add_sandbox_options, describe_spec, sandbox_arguments


def register(sub: Subparsers) -> None:
    """Add `init`."""
    parser = add_command(sub, "init", help="create the runtime root and an empty registry")
    parser.add_argument(
        "--upgrade",
        action="store_true",
        help="move an old single-file registry's goals into one file per goal "
        "(also done on the first open of such a root)",
    )
    add_sandbox_options(parser)  # the root's default of goals added without one
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Create the root (0700) and the registry if missing; idempotent."""
    report = Root.init(
        args.root, registry=args.registry, upgrade=args.upgrade, **sandbox_arguments(args)
    )
    if args.json:
        print_json(report)
        return exitcodes.OK
    verb = "initialised" if report.registry_created else "already initialised"
    print(f"{verb}: runtime root {report.root} (registry {report.registry}, {report.goals} goals)")
    if report.sandbox is not None:
        print(f"default sandbox of new goals: {describe_spec(report.sandbox)}")
    migration = report.migration
    if migration is not None and migration.migrated:
        print(
            f"upgraded: {migration.goals} goals moved to goals/<id>/goal.json "
            f"(old registry kept as {migration.backup})"
        )
    return exitcodes.OK
