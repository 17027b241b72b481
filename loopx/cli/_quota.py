"""`loopx quota show|should-run`."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from loopx import exitcodes
from loopx.cli._common import (
    Subparsers,
    add_command,
    configure_logging,
    print_json,
    root,
    stored_answer,
)

# A warm `loopx quota should-run` prints a stored decision with the standard library
# only (to start within 2x of a bare Python); the rest is imported when needed.
if TYPE_CHECKING:
    from loopx.quota.quotareport import QuotaReport


def register(sub: Subparsers) -> None:
    """Add the `quota` commands."""
    quota = add_command(sub, "quota", help="inspect a goal's compute quota")
    actions = quota.add_subparsers(dest="action", metavar="ACTION", required=True)

    show = add_command(
        actions, "show", help="show a goal's quota policy, window spend, what is left and why"
    )
    show.add_argument("goal_id", metavar="ID")
    show.add_argument("--json", action="store_true", help="print the report as JSON")
    show.set_defaults(func=run_show)

    should = add_command(
        actions,
        "should-run",
        help="exit 0 if the goal may run a turn now, 3 if not (with the reason)",
    )
    should.add_argument("goal_id", metavar="ID")
    should.add_argument("--json", action="store_true", help="print the decision as JSON")
    should.set_defaults(func=run_should_run, configures_logging=True)


def _print_report(report: QuotaReport) -> None:
    from loopx.model import iso_utc  # noqa: PLC0415 - see the imports above

    policy, spend, left, d = report.policy, report.spend, report.remaining, report.decision
    print(f"goal {report.goal_id}: {'ALLOWED' if d.allowed else 'NOT ALLOWED'} ({d.reason})")
    print(f"  {d.message}")
    print(
        f"  window:    {policy.window_hours:g} h, {report.window_start:%Y-%m-%d %H:%M:%S} .. "
        f"{report.window_end:%Y-%m-%d %H:%M:%S} UTC"
    )
    print(
        f"  wall time: {spend.wall_s:,.1f} s spent of {d.allowance_wall_s:,.1f} s "
        f"(compute {policy.compute:g}), {left.wall_s:,.1f} s left"
    )
    for label, used, cap, rest in (
        ("cpu", f"{spend.cpu_s:,.1f} s", policy.cpu_seconds, left.cpu_s),
        ("tokens", f"{spend.tokens:,}", policy.max_tokens, left.tokens),
        ("cost", f"${spend.cost_usd:,.2f}", policy.max_cost_usd, left.cost_usd),
    ):
        limit = "no cap" if cap is None else f"cap {cap:,}, {rest:,} left"
        print(f"  {label + ':':<10} {used} spent ({limit})")
    print(f"  turns:     {spend.turns} in the window, {report.lifetime.turns} in all")
    if d.headroom is not None:
        room = d.headroom
        print(
            f"  host:      {room.available_memory_mb:,.0f} MB available, load "
            f"{room.load_1m:.2f} on {room.cpu_count} CPUs"
        )
    if d.next_eligible_at is not None:
        print(f"  next eligible at {iso_utc(d.next_eligible_at, 'seconds')}")


def run_show(args: argparse.Namespace) -> int:
    """Print the goal's quota report."""
    report = root(args).quota.report(args.goal_id)
    if args.json:
        print_json(report)
    else:
        _print_report(report)
    return exitcodes.OK


def run_should_run(args: argparse.Namespace) -> int:
    """Decide now; exit 0 when the goal may run, NOT_ALLOWED when not.

    The decision stored by the last one is printed while it still holds.
    """
    if (sys.stdout.encoding or "").lower().replace("-", "") == "utf8":  # the stored bytes' own
        where = {"path": args.root, "registry": args.registry}
        code = stored_answer(args, "quota", goal_id=args.goal_id, **where, as_json=args.json)
        if code is not None:
            return code
    configure_logging(args)
    decision = root(args).quota.should_run(args.goal_id)
    if args.json:
        print_json(decision)
    else:
        print(decision.line())
    return exitcodes.OK if decision.allowed else exitcodes.NOT_ALLOWED
