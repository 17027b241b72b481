"""`loopx demo`."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from loopx import exitcodes
from loopx.cli._common import Subparsers, add_agent_options, add_command, check_agents, print_json

if TYPE_CHECKING:
    from loopx.status.view import StatusProjection


def register(sub: Subparsers) -> None:
    """Add `demo`."""
    parser = add_command(
        sub,
        "demo",
        help="run demo goals on a fresh root with a headless fleet, then show the status",
    )
    add_agent_options(parser, default=2, what="agents")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run the demo; exit 0 when every demo goal ended as designed."""
    from loopx.api import Root  # noqa: PLC0415 - not needed by `demo --help`
    from loopx.cli._display import display_for  # noqa: PLC0415 - rich, only to run

    check_agents(args)
    demo = Root.demo(args.root)
    if not args.json:
        print(
            f"loopx demo: runtime root {demo.root}, {args.agents} agents, 4 demo goals; "
            f"plan, work directories and report in {demo.home}"
        )
    with display_for() as show:
        result = demo.run(agents=args.agents, progress=show)
    code = exitcodes.OK if result.as_designed else exitcodes.FAILURE
    # The demo's files stay for the next commands to try; say where, and how they go.
    print(
        f"loopx demo: its files stay in {demo.home} (remove with `rm -rf {demo.home}`)",
        file=sys.stderr,
    )
    if args.json:
        # The document's exit_code is this command's, not the plan's `batch run` verdict
        # (which is 1 while `throttled` waits for its quota).
        print_json(result.report.model_copy(update={"exit_code": code}))
        return code
    print()
    _print_status(demo.status.project(ttl_s=0.0, force=True))
    print(f"\nreport: {result.report_dir / 'report.md'}")
    print("\nnext, try:")
    for line in demo.next_steps(result):
        print(f"  {line}")
    if not result.as_designed:
        print("\nloopx demo: some goals did not end as the demo intends; see the report above")
        return exitcodes.FAILURE
    return exitcodes.OK


def _print_status(projection: StatusProjection) -> None:
    """The same attention queue `loopx status` prints."""
    from rich.console import Console  # noqa: PLC0415 - only on a terminal

    from loopx.cli._status import render_plain, render_table, utcnow  # noqa: PLC0415

    if sys.stdout.isatty():
        Console().print(render_table(projection, utcnow()))
    else:
        print(render_plain(projection, utcnow()))
