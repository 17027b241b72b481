"""`goal add`'s sandbox options, and the line `goal show` prints of a goal's sandbox."""

from __future__ import annotations

import argparse
from typing import Any

from loopx.registry.goalrecords import Goal
from loopx.sandbox import SandboxSpec


def add_sandbox_options(add: argparse.ArgumentParser) -> None:
    """``--sandbox``, ``--allow-domain``, ``--autonomy``, the sandbox's limits (docs/sandbox.md)."""
    add.add_argument(
        "--sandbox",
        choices=("bwrap", "none"),
        help="run the goal's host and done-check inside bubblewrap, network only through "
        "LoopX's proxy ('none' removes it; docs/sandbox.md)",
    )
    add.add_argument(
        "--allow-domain",
        action="append",
        metavar="HOST",
        help="a domain the sandboxed host may reach besides its provider ('*.HOST' for its "
        "subdomains; repeatable; replaces the list)",
    )
    add.add_argument(
        "--autonomy",
        choices=("default", "full"),
        help="full: a sandboxed codex/claude/gemini runs with every permission (docs/hosts.md)",
    )
    add.add_argument("--max-processes", type=int, metavar="N", help="sandbox: processes at most")
    add.add_argument("--max-file-mb", type=int, metavar="N", help="sandbox: largest file written")


def sandbox_arguments(args: argparse.Namespace) -> dict[str, Any]:
    """The `goal add` keywords of the sandbox options."""
    return {
        "sandbox": args.sandbox,
        "allow_domains": args.allow_domain,
        "autonomy": args.autonomy,
        "max_processes": args.max_processes,
        "max_file_mb": args.max_file_mb,
    }


def describe_sandbox(goal: Goal) -> str:
    """`goal show`'s sandbox line."""
    return "none" if goal.sandbox is None else describe_spec(goal.sandbox)


def describe_spec(box: SandboxSpec) -> str:
    """A sandbox in one line: kind, autonomy, network, limits."""
    domains = ", ".join(box.allow_domains) or "only its provider"
    return (
        f"{box.kind}, autonomy {box.autonomy}, network: {domains}; "
        f"at most {box.max_processes} processes, files up to {box.max_file_mb} MB"
    )
