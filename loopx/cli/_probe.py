"""`loopx probe GOAL`: run the goal's read-only next_probe and record the observation."""

from __future__ import annotations

import argparse
from typing import Any

from loopx import exitcodes
from loopx.api import Goals
from loopx.cli._common import add_command, print_json, root

DEFAULT_TIMEOUT_S, DEFAULT_MAX_BYTES = Goals.PROBE_TIMEOUT_S, Goals.PROBE_MAX_BYTES


def register(sub: Any) -> None:
    """Add `probe`."""
    parser = add_command(sub, "probe", help="run a goal's read-only next_probe command")
    parser.add_argument("goal_id", metavar="GOAL")
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        metavar="S",
        help=f"kill the probe after S seconds (default {DEFAULT_TIMEOUT_S:g})",
    )
    parser.add_argument(
        "--max-bytes",
        type=int,
        default=DEFAULT_MAX_BYTES,
        metavar="N",
        help=f"keep at most N bytes of stdout and of stderr (default {DEFAULT_MAX_BYTES})",
    )
    parser.add_argument("--json", action="store_true")
    parser.set_defaults(func=run_probe_command)


def run_probe_command(args: argparse.Namespace) -> int:
    """Probe, print what it saw; the exit code is 0 whatever the probe's own exit code."""
    observation = root(args).goals.probe(
        args.goal_id, timeout_s=args.timeout, max_bytes=args.max_bytes
    )
    if args.json:
        print_json(observation)
        return exitcodes.OK
    end = "timed out" if observation.timed_out else f"exit {observation.exit_code}"
    print(
        f"probe of {observation.goal_id} ({end}, {observation.duration_s:.2f}s): {observation.command}"
    )
    if observation.stdout:
        print(observation.stdout, end="" if observation.stdout.endswith("\n") else "\n")
    if observation.stderr:
        print(
            "stderr:\n" + observation.stderr, end="" if observation.stderr.endswith("\n") else "\n"
        )
    if observation.truncated:
        print("(output truncated)")
    return exitcodes.OK
