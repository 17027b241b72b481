"""`loopx logs [GOAL] [--agent N | --supervisor] [-f] [--since DURATION] [--json]`."""

from __future__ import annotations

import argparse
import json
import signal
import sys
from typing import TYPE_CHECKING

from loopx import exitcodes, process
from loopx.cli._common import Subparsers, add_command, root

if TYPE_CHECKING:
    from loopx.history.logreader import LogEntry


def register(sub: Subparsers) -> None:
    """Add `logs`."""
    logs = add_command(sub, "logs", help="read and follow the agents' and supervisor's logs")
    logs.add_argument("goal_id", metavar="GOAL", nargs="?", help="only this goal's lines and turns")
    which = logs.add_mutually_exclusive_group()
    which.add_argument("--agent", type=int, metavar="N", help="only logs/agent-N.log")
    which.add_argument("--supervisor", action="store_true", help="only the supervisor's logs")
    logs.add_argument("-f", "--follow", action="store_true", help="keep printing new lines")
    logs.add_argument("--since", metavar="DURATION", help="only the last 30s, 10m, 2h, 1d")
    logs.add_argument("--json", action="store_true", help="one JSON object per line")
    logs.set_defaults(func=run_logs)


def run_logs(args: argparse.Namespace) -> int:
    """Print the entries asked for; with -f, follow until Ctrl-C (exit 130) or SIGTERM (0)."""
    since = args.since  # a duration such as 10m, parsed (and refused) by the library
    logs = root(args).logs
    options = {"agent": args.agent, "supervisor": args.supervisor, "since": since}
    if not args.follow:
        for entry in logs.read(args.goal_id, **options):
            _print(entry, as_json=args.json)
        return exitcodes.OK
    stopped: list[int] = []
    signal.signal(signal.SIGTERM, lambda *_: stopped.append(exitcodes.OK))
    process.own_sigint(lambda *_: stopped.append(exitcodes.INTERRUPTED))
    for entry in logs.follow(args.goal_id, stop=lambda: bool(stopped), **options):
        _print(entry, as_json=args.json)
        if stopped:
            break
    return stopped[0] if stopped else exitcodes.OK


def _print(entry: LogEntry, *, as_json: bool) -> None:
    if as_json:
        line = entry.model_dump_json()
    else:
        where = " ".join(
            f"{k}={v}" for k, v in (("goal", entry.goal_id), ("turn", entry.turn_key)) if v
        )
        rest = " ".join(f"{k}={json.dumps(v)}" for k, v in entry.fields.items())
        head = f"{entry.timestamp or '-'} {entry.source} {entry.level or '-':<7} {entry.event}"
        line = " ".join(part for part in (head, where, rest) if part)
    sys.stdout.write(line + "\n")
    sys.stdout.flush()
