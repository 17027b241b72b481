"""`loopx batch run PLAN`."""

from __future__ import annotations

import argparse
import signal
from pathlib import Path
from typing import Any

from loopx.batch.plan import load_plan
from loopx.cli._common import add_agent_options, add_command, check_agents, layout, print_json
from loopx.model import utcnow
from loopx.registry.checks import check_program
from loopx.registry.model import HostKind


def register(sub: Any) -> None:
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
    run.add_argument("--json", action="store_true", help="print report.json instead of a summary")
    run.set_defaults(func=run_batch)


def run_batch(args: argparse.Namespace) -> int:
    """Validate the plan, register it, run until idle, write and summarise the report.

    Exit 0 when every goal completed, 4 (``NEEDS_HUMAN``) when some need a human, 1 otherwise.
    """
    from loopx.supervisor.batch import (  # noqa: PLC0415 - the kernel CLI loads the fleet lazily
        BatchConfig,
        BatchRun,
        default_report_dir,
        register_plan,
        write_report,
    )
    from loopx.supervisor.display import display_for  # noqa: PLC0415

    check_agents(args)
    plan_path = args.plan.resolve()
    plan = load_plan(plan_path)  # a malformed plan is rejected before anything is registered
    for entry in plan.goals:
        host = entry.host_spec()
        if host.kind == HostKind.COMMAND:
            check_program(host.argv[0], entry.workdir_path(plan_path.parent))
    where = layout(args, create=True)
    goal_ids = register_plan(where, plan, plan_path.parent, now=utcnow())
    config = BatchConfig(
        agents=args.agents,
        report_dir=args.report,
        max_wall_s=args.max_wall,
        idle_horizon_s=args.idle_horizon,
    )
    with display_for() as show:
        batch = BatchRun(where, goal_ids, config, show)
        signal.signal(signal.SIGTERM, batch.request_stop)
        signal.signal(signal.SIGINT, batch.request_stop)
        report = batch.run()
    report_dir = args.report or default_report_dir(where, report.generated_at)
    json_path, md_path = write_report(report, report_dir)
    if args.json:
        print_json(report)
    else:
        for g in report.goals:
            print(
                f"{g.goal_id:<24} {g.outcome:<12} {g.turns:>4} turns  {g.cpu_s:8.2f} CPU s  {g.wall_s:8.2f} wall s"
            )
        print(f"report: {md_path} (and {json_path.name})")
    return report.exit_code
