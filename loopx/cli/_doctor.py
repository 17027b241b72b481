"""`loopx doctor [--json]`: check the whole root and say what to repair."""

from __future__ import annotations

import argparse

from loopx import exitcodes
from loopx.api import Root
from loopx.cli._common import Subparsers, add_command, print_json
from loopx.doctor.findings import Severity


def register(sub: Subparsers) -> None:
    """Add `doctor`."""
    parser = add_command(
        sub, "doctor", help="check permissions, file schemas, leases, journals, quarantine, fleet"
    )
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--repair",
        action="store_true",
        help="first shift future-dated goal states back to now (written by a clock that ran "
        "ahead) and remove worktree locks whose git process is gone; never changes a tracked file",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Diagnose the root (read-only); exit 0 when healthy, 1 otherwise."""
    # Not Root.open: doctor must also describe a root that open refuses.
    if args.repair:
        for path in Root.repair_clock(args.root, registry=args.registry):
            print(f"repaired: {path}: dated back to now")
        for path in Root.repair_worktree_locks(args.root, registry=args.registry):
            print(f"repaired: {path}: removed (the git process that held it is gone)")
    report = Root.diagnose(args.root, registry=args.registry)
    if args.json:
        print_json(report)
    else:
        for finding in report.findings:
            print(
                f"{finding.severity.upper():<7} {finding.code}  {finding.path}: {finding.problem}"
            )
            if finding.repair:
                print(f"        repair: {finding.repair}")
        counts = report.counts
        verdict = "healthy" if report.healthy else "NOT healthy"
        print(
            f"{report.root}: {verdict}: {counts[Severity.ERROR]} error(s), "
            f"{counts[Severity.WARNING]} warning(s), {counts[Severity.INFO]} info; checked "
            f"{report.files_checked} files, {report.goals_checked} goals, "
            f"{report.journals_checked} journals"
        )
    return exitcodes.OK if report.healthy else exitcodes.FAILURE
