"""`loopx doctor [--json]`: check the whole root and say what to repair."""

from __future__ import annotations

import argparse
from typing import Any

from loopx import exitcodes
from loopx.cli._common import add_command, print_json, resolved
from loopx.doctor import Severity, diagnose
from loopx.root import Layout


def register(sub: Any) -> None:
    """Add `doctor`."""
    parser = add_command(
        sub, "doctor", help="check permissions, file schemas, leases, journals, quarantine, fleet"
    )
    parser.add_argument("--json", action="store_true")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Diagnose the root (read-only); exit 0 when healthy, 1 otherwise."""
    # Not open_root: doctor must also describe a root that open_root refuses.
    report = diagnose(Layout.of(resolved(args)))
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
