"""`loopx goal add|import|list|show|reset-session` (pause, resume, done, reopen: _goalstatus)."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from loopx import exitcodes
from loopx.cli._common import Subparsers, add_command, print_json, root
from loopx.cli._goalstatus import register_status
from loopx.cli._handoff import add_handoff_options, handoff_arguments
from loopx.cli._sandbox import add_sandbox_options, describe_sandbox, sandbox_arguments
from loopx.cli._work import add_worktree_options, register_work, worktree_arguments
from loopx.errors import InvalidPolicyError
from loopx.registry.goalrecords import Goal, HostKind
from loopx.state import TodoStatus

# CLI flag -> QuotaPolicy field.
QUOTA_FLAGS = {
    "quota_compute": "compute",
    "quota_window_hours": "window_hours",
    "cpu_seconds": "cpu_seconds",
    "turn_timeout": "turn_timeout_s",
    "stall_timeout": "stall_timeout_s",
    "max_rss_mb": "max_rss_mb",
    "min_free_memory_mb": "min_free_memory_mb",
    "max_load_per_cpu": "max_load_per_cpu",
    "max_tokens": "max_tokens",
    "max_cost_usd": "max_cost_usd",
}
# Policy field (as InvalidPolicyError names it) -> the `goal add` flag that sets it.
POLICY_FLAGS = {
    f"quota.{field}": "--" + flag.replace("_", "-") for flag, field in QUOTA_FLAGS.items()
} | {"resources": "--resource"}


def register(sub: Subparsers) -> None:
    """Add the `goal` commands."""
    goal = add_command(sub, "goal", help="register and manage goals")
    actions = goal.add_subparsers(dest="action", metavar="ACTION", required=True)

    add = add_command(actions, "add", help="register a goal (or change one with --update)")
    add.add_argument("goal_id", metavar="ID")
    add.add_argument("--objective", metavar="TEXT", help="what the goal should achieve")
    add.add_argument("--workdir", metavar="DIR", help="host's working directory (default: cwd)")
    add.add_argument("--host", metavar="'CMD ARGS'", help="host command, split like a shell")
    add.add_argument(
        "--host-kind",
        metavar="KIND",
        help="how the host is run: command, demo, codex, claude, gemini, opencode, qwen, pi, aider "
        "or a plug-in's kind "
        "(default: command with --host, else demo)",
    )
    add.add_argument(
        "--session-max-turns",
        type=int,
        metavar="N",
        help="codex/claude/gemini: start a fresh CLI session after N turns of one (with --host-kind)",
    )
    add.add_argument(
        "--unreachable-after",
        type=float,
        metavar="S",
        help="codex, gemini: stop a host stuck retrying an unreachable model server after S seconds "
        "(default 120); the turn waits and retries (with --host-kind)",
    )
    add.add_argument("--priority", type=int, metavar="N", help="higher runs first (default 0)")
    add.add_argument("--quota-compute", type=float, metavar="F", help="share of a window, 0..1")
    add.add_argument("--quota-window-hours", type=float, metavar="H", help="window (default 24)")
    add.add_argument("--cpu-seconds", type=float, metavar="N", help="CPU-seconds cap per window")
    add.add_argument("--turn-timeout", type=float, metavar="S", help="seconds per turn")
    add.add_argument(
        "--stall-timeout",
        type=float,
        metavar="S",
        help="seconds without host output before the stall ladder acts (default 300 for claude "
        "and codex, off for others)",
    )
    add.add_argument("--max-rss-mb", type=int, metavar="N", help="peak RSS cap per turn")
    add.add_argument("--min-free-memory-mb", type=int, metavar="N", help="host guard")
    add.add_argument("--max-load-per-cpu", type=float, metavar="F", help="host guard")
    add.add_argument("--max-tokens", type=int, metavar="N", help="token cap per window")
    add.add_argument("--max-cost-usd", type=float, metavar="F", help="cost cap per window")
    add.add_argument("--next-probe", metavar="'CMD'", help="read-only command to observe progress")
    add.add_argument("--max-host-attempts", type=int, metavar="N", help="host runs per turn")
    add.add_argument(
        "--resource",
        action="append",
        metavar="NAME=AMOUNT",
        help="Ray back-end: a custom resource an agent must hold to run this goal (repeatable)",
    )
    _add_check_options(add)  # --done-check ...
    _add_account_options(add)  # --account ...
    add_handoff_options(add)  # --fallback-account ...
    add_worktree_options(add)  # --worktree ...
    add_sandbox_options(add)  # --sandbox ...
    add.add_argument("--update", action="store_true", help="change an existing goal")
    add.add_argument("--json", action="store_true", help="print the goal as JSON")
    add.set_defaults(func=run_add)

    lister = add_command(actions, "list", help="list registered goals")
    lister.add_argument("--json", action="store_true")
    lister.set_defaults(func=run_list)

    importer = add_command(
        actions,
        "import",
        help="register many goals from JSON Lines (one `goal list --json` entry per line) "
        "or a batch plan; checked whole, idempotent",
    )
    importer.add_argument("file", metavar="FILE", type=Path)
    importer.add_argument(
        "--no-check",
        action="store_true",
        help="skip checking that each workdir exists and each command host's program is found",
    )
    importer.add_argument("--json", action="store_true")
    importer.set_defaults(func=run_import)

    show = add_command(actions, "show", help="show a goal's policy and state")
    show.add_argument("goal_id", metavar="ID")
    show.add_argument("--json", action="store_true")
    show.set_defaults(func=run_show)

    register_status(actions)  # goal pause, resume, done, reopen
    register_reset_session(actions)
    register_work(actions)  # goal worktree, goal merge


def _add_check_options(add: argparse.ArgumentParser) -> None:
    """`goal add`'s done-check options (docs/work.md)."""
    add.add_argument(
        "--done-check",
        metavar="'CMD ARGS'",
        help="a command (split like --host) that must exit 0 in the workdir before a "
        "`completed` counts as done (docs/work.md)",
    )
    add.add_argument("--done-check-timeout", type=float, metavar="S", help="seconds (default 600)")
    add.add_argument(
        "--done-check-every-turn",
        action="store_true",
        default=None,
        help="run the done-check after every turn and record its result",
    )


def _add_account_options(add: argparse.ArgumentParser) -> None:
    """`goal add`'s account options (`loopx account`)."""
    add.add_argument(
        "--account",
        metavar="NAME",
        help="the provider account its turns run on (see `loopx account`)",
    )
    add.add_argument(
        "--no-account",
        action="store_true",
        help="run on the host kind's default account again (with --update)",
    )
    add.add_argument(
        "--on-limit", choices=("wait", "gate", "stop"), help="override the account's --on-limit"
    )
    add.add_argument(
        "--max-limit-waits", type=int, metavar="N", help="override the account's --max-limit-waits"
    )
    add.add_argument(
        "--no-check",
        action="store_true",
        help="register even if the workdir, host or done-check program does not exist yet",
    )


def register_reset_session(actions: Subparsers) -> None:
    """Add `goal reset-session`."""
    reset = add_command(
        actions,
        "reset-session",
        help="start a fresh host CLI session (codex/claude/gemini) next turn",
    )
    reset.add_argument("goal_id", metavar="ID")
    reset.add_argument("--json", action="store_true")
    reset.set_defaults(func=run_reset_session)


def run_reset_session(args: argparse.Namespace) -> int:
    """Drop a goal's host session."""
    result = root(args).goals.reset_session(args.goal_id)
    dropped = result.dropped
    if args.json:
        print_json(result)
    elif dropped is None:
        print(f"goal {args.goal_id} has no host session; its next turn starts a fresh one anyway")
    else:
        print(
            f"dropped {dropped.kind} session {dropped.session_id} ({dropped.turns} turns) of "
            f"goal {args.goal_id}; its next turn starts a fresh one"
        )
    return exitcodes.OK


def _resources(given: list[str] | None) -> dict[str, float] | None:
    """``--resource NAME=AMOUNT`` flags as a dict (None when none was given)."""
    if not given:
        return None
    out: dict[str, float] = {}
    for item in given:
        name, sep, amount = item.partition("=")
        try:
            value = float(amount) if sep else float("nan")
        except ValueError:
            value = float("nan")
        if not name or value != value:  # noqa: PLR0124 - NaN check: not a number
            raise InvalidPolicyError(
                "--resource", f"expected NAME=AMOUNT with a number, got {item!r}"
            )
        out[name] = value
    return out


def run_add(args: argparse.Namespace) -> int:
    """Register or update a goal."""
    try:
        document = root(args).goals.add(
            args.goal_id,
            objective=args.objective,
            workdir=args.workdir,
            host=args.host,
            host_kind=args.host_kind,
            session_max_turns=args.session_max_turns,
            unreachable_after_s=args.unreachable_after,
            priority=args.priority,
            quota={field: getattr(args, flag) for flag, field in QUOTA_FLAGS.items()},
            next_probe=args.next_probe,
            max_host_attempts=args.max_host_attempts,
            resources=_resources(args.resource),
            done_check=args.done_check,
            done_check_timeout_s=args.done_check_timeout,
            done_check_every_turn=args.done_check_every_turn,
            **worktree_arguments(args),
            **sandbox_arguments(args),
            account="" if args.no_account else args.account,
            on_limit=args.on_limit,
            max_limit_waits=args.max_limit_waits,
            **handoff_arguments(args),
            update=args.update,
            check=not args.no_check,
        )
    except InvalidPolicyError as e:
        # Name the flag the user typed, not the policy field behind it.
        flag = POLICY_FLAGS.get(e.field)
        if flag is None:
            raise
        raise InvalidPolicyError(flag, e.problem) from e
    goal = document.goal
    _warn_shared({goal.id: document.shared_workdir} if document.shared_workdir else {})
    if args.json:
        print_json(document)
    else:
        print(f"{'updated' if args.update else 'added'} goal {goal.id} ({goal.status})")
    return exitcodes.OK


def _warn_shared(shared: dict[str, list[str]]) -> None:
    """Say on stderr which goals share a workdir (their turns run one at a time)."""
    items = list(shared.items())
    for goal_id, others in items[:_SHARED_WARNINGS]:
        print(
            f"warning: goal {goal_id} shares its workdir with goal(s) {', '.join(others)}: "
            "their turns run one at a time (one turn per workdir); give each its own "
            "directory or worktree to run them side by side (docs/work.md)",
            file=sys.stderr,
        )
    if len(items) > _SHARED_WARNINGS:
        print(
            f"warning: {len(items) - _SHARED_WARNINGS} more goal(s) share a workdir "
            "(`shared_workdir` in --json names them)",
            file=sys.stderr,
        )


_SHARED_WARNINGS = 5  # lines, then one line for the rest: an import of 10,000 is not 10,000 lines


def _describe_host(goal: Goal) -> str:
    if goal.host.kind == HostKind.COMMAND:
        return shlex.join(goal.host.argv)
    return str(goal.host.kind)


def run_list(args: argparse.Namespace) -> int:
    """List goals, highest priority first."""
    listed = root(args).goals.list()
    if args.json:
        print_json(listed)
        return exitcodes.OK
    goals = listed.goals
    if not goals:
        print("no goals; add one with `loopx goal add ID --objective TEXT`")
        return exitcodes.OK
    width = max(len(g.id) for g in goals)
    for g in goals:
        print(
            f"{g.id:<{width}}  {g.status:<8}  p{g.priority:<3}  {_describe_host(g)}  {g.objective[:60]}"
        )
    return exitcodes.OK


def run_import(args: argparse.Namespace) -> int:
    """Register the goals of an import file."""
    report = root(args).goals.import_file(args.file, check=not args.no_check)
    _warn_shared(report.shared_workdir)
    if args.json:
        print_json(report)
    else:
        print(
            f"imported {report.added} new goals, {report.unchanged} unchanged, from {report.source}"
        )
    return exitcodes.OK


def run_show(args: argparse.Namespace) -> int:
    """Show one goal."""
    view = root(args).goals.show(args.goal_id)
    if args.json:
        print_json(view)
        return exitcodes.OK
    goal, state = view.goal, view.state
    print(f"goal {goal.id}  [{goal.status}]  priority {goal.priority}")
    print(f"  objective: {goal.objective}")
    print(f"  workdir:   {goal.workdir}")
    print(f"  host:      {goal.host.kind} {shlex.join(goal.host.argv)}".rstrip())
    print(f"  sandbox:   {describe_sandbox(goal)}")
    quota = goal.quota.model_dump(mode="json")
    print("  quota:     " + ", ".join(f"{k}={v}" for k, v in quota.items() if v is not None))
    if goal.done_check is not None:
        print(f"  done-check: {shlex.join(goal.done_check.argv)}", end="")
        check = state.last_check
        print(f"  (last: {check.summary}, turn {check.turn_key})" if check else "  (not run yet)")
    print(f"  next action: {state.next_action or '-'}   turns applied: {state.turn_seq}")
    if goal.fallback_accounts:
        pin = "" if goal.handoff else "  (pinned: --no-handoff)"
        print(f"  fallback accounts: {', '.join(goal.fallback_accounts)}{pin}")
    if state.handoffs:
        print(f"  hand-offs: {state.handoffs}")
    for gate in state.open_gates:
        print(f"  OPEN GATE {gate.id}: {gate.question}")
    for todo in state.todos:
        print(f"  [{'x' if todo.status is TodoStatus.DONE else ' '}] {todo.id}: {todo.text}")
    return exitcodes.OK
