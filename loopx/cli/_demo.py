"""`loopx demo`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from rich.console import Console

from loopx import exitcodes
from loopx.cli._common import add_agent_options, add_command, check_agents, print_json
from loopx.cli._status import render_plain, render_table
from loopx.model import utcnow
from loopx.root import Layout, ResolvedRoot, RootSource, open_root
from loopx.status.cache import load_status


def register(sub: Any) -> None:
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
    from loopx.supervisor.demo import demo_home, next_steps, run_demo  # noqa: PLC0415
    from loopx.supervisor.display import display_for  # noqa: PLC0415

    check_agents(args)
    home, root = demo_home(Path(args.root).resolve() if args.root else None)
    layout = open_root(ResolvedRoot(root, root / "registry.json", RootSource.FLAG), create=True)
    if not args.json:
        print(
            f"loopx demo: runtime root {root}, {args.agents} agents, 4 demo goals; "
            f"plan, work directories and report in {home}"
        )
    with display_for() as show:
        result = run_demo(layout, home, agents=args.agents, show=show)
    if args.json:
        print_json(result.report)
        return exitcodes.OK if result.as_designed else exitcodes.FAILURE
    print()
    _print_status(layout)
    print(f"\nreport: {result.report_dir / 'report.md'}")
    print("\nnext, try:")
    for line in next_steps(result, root):
        print(f"  {line}")
    if not result.as_designed:
        print("\nloopx demo: some goals did not end as the demo intends; see the report above")
        return exitcodes.FAILURE
    return exitcodes.OK


def _print_status(where: Layout) -> None:
    """The same attention queue `loopx status` prints."""
    now = utcnow()
    projection = load_status(where, now=now, ttl_s=0.0, force=True)
    if sys.stdout.isatty():
        Console().print(render_table(projection, now))
    else:
        print(render_plain(projection, now))
