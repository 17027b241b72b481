"""`loopx replay GOAL [--verify] [--repair] [--json]`: rebuild a goal from its journals alone."""

from __future__ import annotations

import argparse
from typing import Any

from loopx import exitcodes
from loopx.cli._common import add_command, print_json, root
from loopx.turn.replay import ReplayReport


def register(sub: Any) -> None:
    """Add `replay`."""
    parser = add_command(
        sub, "replay", help="rebuild a goal's state, history and quota ledger from its journals"
    )
    parser.add_argument("goal_id", metavar="GOAL")
    parser.add_argument(
        "--verify",
        action="store_true",
        help="compare with the files on disk; exit 1 on a difference",
    )
    parser.add_argument(
        "--repair",
        action="store_true",
        help="rewrite every differing file from the journals (old files go to quarantine/)",
    )
    parser.add_argument("--json", action="store_true")
    parser.set_defaults(func=run)


def _print_text(report: ReplayReport) -> None:
    print(
        f"{report.goal_id}: replayed {len(report.journals)} journal(s): state at turn "
        f"{report.state.get('turn_seq')}, {len(report.history)} history line(s), "
        f"{len(report.ledger)} ledger line(s), {len(report.runs)} run log file(s)"
    )
    for key in report.pending:
        print(f"PENDING {key}: in progress, not replayed (`loopx recover` finishes it)")
    for key in report.invalid:
        print(f"INVALID {key}: fails inspection, not replayed (`loopx recover` quarantines it)")
    for name in report.repaired:
        print(f"REPAIRED {name}")
    for path in report.set_aside:
        print(f"  old file kept at {path}")
    if report.verified:
        for difference in report.differences:
            print(f"DIFF {difference.line()}")
        if report.clean:
            print("verified: the files on disk match the journals")
        elif not report.differences:
            print("verified: no difference, but some journals were not replayed")


def run(args: argparse.Namespace) -> int:
    """Replay (and verify or repair) one goal; exit 1 when the disk disagrees."""
    turns = root(args).turns
    report = (
        turns.repair(args.goal_id)
        if args.repair
        else turns.replay(args.goal_id, verify=args.verify)
    )
    if args.json:
        print_json(report)
    else:
        _print_text(report)
    if report.verified and not report.clean:
        return exitcodes.FAILURE
    return exitcodes.OK
