"""`loopx hosts [--json]` and `loopx hosts check KIND [--accept] [--json]`: the host CLIs and the canary."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from loopx import exitcodes
from loopx.cli._common import Subparsers, add_command, print_json, root
from loopx.hostcanary import TrustStatus

if TYPE_CHECKING:
    from loopx.hostcanary import HostView


def register(sub: Subparsers) -> None:
    """Add `hosts` and `hosts check`."""
    hosts = add_command(
        sub, "hosts", help="host CLIs: versions, the canary's verdicts, probing again"
    )
    hosts.add_argument("--json", action="store_true")
    hosts.set_defaults(func=run_list)
    actions = hosts.add_subparsers(dest="action", metavar="ACTION")
    checker = add_command(
        actions, "check", help="probe a host kind's CLI now (version, flags, a free two-turn smoke)"
    )
    checker.add_argument("kind", metavar="KIND", help="the host kind: codex, claude, gemini, ...")
    checker.add_argument(
        "--accept",
        action="store_true",
        help="trust the installed version even if the probe fails (lifts the quarantine)",
    )
    checker.add_argument("--json", action="store_true")
    checker.set_defaults(func=run_check)


def _line(view: HostView) -> str:
    if view.binary is None:
        return f"{view.kind}: {view.program} not found on PATH"
    tested = ", ".join(view.tested_versions) or "none declared"
    if view.version is None:
        where = "version unreadable"
    elif view.tested:
        where = "tested"
    elif view.within_tested_range:
        where = "untested, within the tested range"
    else:
        where = "untested, outside the tested range"
    text = f"{view.kind}: {view.binary} {view.version or ''} ({where}; tested: {tested})"
    if view.status is TrustStatus.QUARANTINED:
        text += f"\n  QUARANTINED: {view.reason}"
    elif view.last_probe is not None:
        text += (
            f"\n  canary: {view.last_probe.outcome} at {view.last_probe.checked_at:%Y-%m-%d %H:%M}Z"
        )
    return text


def run_list(args: argparse.Namespace) -> int:
    """List every host kind with a CLI."""
    listing = root(args).hosts.list()
    if args.json:
        print_json(listing)
        return exitcodes.OK
    for view in listing.hosts:
        print(_line(view))
    return exitcodes.OK


def run_check(args: argparse.Namespace) -> int:
    """Probe one kind; exit 1 while it stays quarantined."""
    report = root(args).hosts.check(args.kind, accept=args.accept)
    if args.json:
        print_json(report)
    else:
        probe = report.probe
        print(f"{args.kind}: {probe.outcome}" + (f": {probe.detail}" if probe.detail else ""))
        if report.accepted is not None:
            print(f"{args.kind}: version {report.accepted} accepted as trusted")
        print(_line(report.host))
    quarantined = report.host.status is TrustStatus.QUARANTINED
    return exitcodes.FAILURE if quarantined else exitcodes.OK
