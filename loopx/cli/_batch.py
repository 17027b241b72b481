"""`loopx batch run PLAN`."""

from __future__ import annotations

import argparse
import signal
import threading
from pathlib import Path

from loopx import exitcodes, process
from loopx.cli._common import (
    Subparsers,
    add_agent_options,
    add_command,
    check_agents,
    print_json,
    root,
)


def register(sub: Subparsers) -> None:
    """Add `batch run`."""
    batch = add_command(sub, "batch", help="headless batch runs")
    actions = batch.add_subparsers(dest="action", metavar="ACTION", required=True)
    run = add_command(
        actions, "run", help="register a plan's goals, run a fleet until idle, report"
    )
    run.add_argument("plan", metavar="PLAN", type=Path, help="plan file (.json or .toml)")
    add_agent_options(run, default=2, what="agents")
    run.add_argument(
        "--report",
        type=Path,
        metavar="DIR",
        help="report directory (default: <root>/reports/batch-<UTC time>)",
    )
    run.add_argument("--max-wall", type=float, metavar="S", help="stop the fleet after S seconds")
    run.add_argument(
        "--idle-horizon",
        type=float,
        default=60.0,
        metavar="S",
        help="a goal that may run again within S seconds (a retry after a failure, a wait) "
        "still counts as progressing (default 60)",
    )
    run.add_argument(
        "--fail-fast",
        action="store_true",
        help="end a goal as failed at its first failed turn (a plan's max_failures overrides)",
    )
    run.add_argument("--json", action="store_true", help="print report.json instead of a summary")
    run.set_defaults(func=run_batch)


def run_batch(args: argparse.Namespace) -> int:
    """Validate the plan, register it, run until idle, write and summarise the report.

    Exit 0 when every goal completed, 4 (``NEEDS_HUMAN``) when some need a human, 1 otherwise;
    130 when Ctrl-C stopped it (after the report is written).
    """
    from loopx.api import Fleet  # noqa: PLC0415 - not needed by `batch run --help`
    from loopx.cli._display import display_for  # noqa: PLC0415 - rich, only to run

    check_agents(args)
    Fleet.check_plan(args.plan)  # a malformed plan is rejected before the root is created
    fleet = root(args, create=True).fleet
    stop = threading.Event()
    interrupted = threading.Event()  # Ctrl-C: the report is written, the exit code is 130

    def on_sigint(*_: object) -> None:
        interrupted.set()
        stop.set()

    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    process.own_sigint(on_sigint)
    with display_for() as show:
        report = fleet.run_plan(
            args.plan,
            agents=args.agents,
            report_dir=args.report,
            max_wall_s=args.max_wall,
            idle_horizon_s=args.idle_horizon,
            progress=show,
            stop=stop,
            fail_fast=args.fail_fast,
        )
    if args.json:
        print_json(report)
    else:
        for g in report.goals:
            print(
                f"{g.goal_id:<24} {g.outcome:<12} {g.turns:>4} turns  {g.cpu_s:8.2f} CPU s  {g.wall_s:8.2f} wall s"
            )
        print(f"report: {fleet.report_dir(report, args.report) / 'report.md'} (and report.json)")
    return exitcodes.INTERRUPTED if interrupted.is_set() else report.exit_code
