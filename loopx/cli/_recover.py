"""`loopx recover`: finish or quarantine every unfinished turn journal of the root."""

from __future__ import annotations

import argparse

from loopx import exitcodes
from loopx.cli._common import Subparsers, add_command, print_json, root

TYPE_CHECKING = False
if TYPE_CHECKING:
    from loopx.turn.recovery import RecoveryReport


def register(sub: Subparsers) -> None:
    """Add `recover`."""
    parser = add_command(sub, "recover", help="finish interrupted turns from their journals")
    parser.add_argument("--json", action="store_true")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Recover the root; exit 1 when something needs a human (quarantine or error)."""
    report = root(args).turns.recover()
    if args.json:
        print_json(report)
    else:
        print("\n".join(_lines(report)) or "nothing to recover")
    return exitcodes.OK if report.clean else exitcodes.FAILURE


def _lines(report: RecoveryReport) -> list[str]:
    """The report, one line per thing recovery did or left (none: nothing to recover)."""
    return [
        *(f"{a.turn_key}: {a.decision} -> {a.status or 'quarantined'}" for a in report.actions),
        *(f"QUARANTINED {p} (see the .reason.json beside it)" for p in report.quarantined),
        *(f"{k}: host will run again at the goal's next claim" for k in report.retry_pending),
        *(f"{g}: skipped, a live agent holds its lease" for g in report.busy_goals),
        *(f"{g}: merge finished" for g in report.merges),
        *(f"merge cancelled: {line}" for line in report.merges_cancelled),
        *(f"merge waiting: {line}" for line in report.merges_waiting),
        *(f"ERROR {e}" for e in report.errors),
    ]
