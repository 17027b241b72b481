"""`loopx account add|list|show|edit|remove|resolve|budget|login|check`."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from loopx import exitcodes
from loopx.cli._common import Subparsers, add_command, print_json, root
from loopx.cli._sandbox import add_sandbox_options, sandbox_arguments

if TYPE_CHECKING:
    from loopx.accounts.outputs import AccountSummary
    from loopx.accounts.records import Account

BAR_WIDTH = 20

POLICY_OPTIONS = (
    "on_limit", "max_limit_waits", "max_overloads", "max_tokens", "max_cost_usd", "window_hours",
    "price_in_per_mtok", "price_out_per_mtok", "admit_until", "admit_past_priority",
    "no_admit_past", "max_handoffs", "max_resumes",
)  # fmt: skip


def policy_options(parser: argparse.ArgumentParser) -> None:
    """The account policy flags `add` and `edit` share."""
    parser.add_argument("--env-file", metavar="FILE", help="credentials, KEY=VALUE lines (0600)")
    parser.add_argument(
        "--env",
        action="append",
        metavar="K=V",
        help="a non-secret variable for its hosts, e.g. HTTPS_PROXY=URL (repeatable)",
    )
    parser.add_argument(
        "--on-limit",
        choices=("wait", "gate", "stop"),
        help="on a usage limit: wait for the reset (default), open a gate, or pause the goal",
    )
    parser.add_argument(
        "--max-limit-waits", type=int, metavar="N", help="after N resets waited for, ask a human"
    )
    parser.add_argument(
        "--max-overloads", type=int, metavar="N", help="overloads in a row that ask a human (5)"
    )
    parser.add_argument("--max-tokens", type=int, metavar="N", help="token budget per window")
    parser.add_argument("--max-cost-usd", type=float, metavar="F", help="cost budget per window")
    parser.add_argument("--window-hours", type=float, metavar="H", help="budget window (24)")
    parser.add_argument(
        "--max-handoffs",
        type=int,
        metavar="N",
        help="turns other accounts' goals hand off to it per budget window (no cap)",
    )
    parser.add_argument(
        "--max-resumes",
        type=int,
        metavar="N",
        help="automatic resumes of its stalled hosts per budget window (no cap; 0: none)",
    )
    parser.add_argument(
        "--price-in-per-mtok", type=float, metavar="USD", help="estimate cost: input price"
    )
    parser.add_argument(
        "--price-out-per-mtok", type=float, metavar="USD", help="estimate cost: output price"
    )
    parser.add_argument(
        "--admit-until",
        action="append",
        metavar="PCT",
        help="start no turn once a provider window is at PCT (95%%, default); "
        "WINDOW=PCT for one window; off (or WINDOW=off) to never hold (repeatable)",
    )
    past = parser.add_mutually_exclusive_group()
    past.add_argument(
        "--admit-past-priority",
        type=int,
        metavar="P",
        help="goals with a priority above P still start past the mark",
    )
    past.add_argument(
        "--no-admit-past", action="store_true", help="no goal starts past the mark (default)"
    )
    add_sandbox_options(parser)  # the default of goals added on the account
    parser.add_argument("--json", action="store_true")


def register(sub: Subparsers) -> None:
    """Add the `account` commands."""
    account = add_command(
        sub, "account", help="provider accounts: credentials, usage limits and budgets"
    )
    actions = account.add_subparsers(dest="action", metavar="ACTION", required=True)

    adder = add_command(actions, "add", help="register a provider account")
    adder.add_argument("name", metavar="NAME")
    adder.add_argument("--host-kind", required=True, metavar="KIND", help="codex, claude, ...")
    policy_options(adder)
    adder.set_defaults(func=run_add)

    editor = add_command(actions, "edit", help="change an account's policy")
    editor.add_argument("name", metavar="NAME")
    editor.add_argument("--no-env-file", action="store_true", help="drop its env file")
    policy_options(editor)
    editor.set_defaults(func=run_edit)

    lister = add_command(actions, "list", help="every account, its state and goals")
    lister.add_argument("--json", action="store_true")
    lister.set_defaults(func=run_list)

    shower = add_command(actions, "show", help="one account's policy, state and goals")
    shower.add_argument("name", metavar="NAME")
    shower.add_argument("--json", action="store_true")
    shower.set_defaults(func=run_show)

    remover = add_command(actions, "remove", help="remove an account no goal uses")
    remover.add_argument("name", metavar="NAME")
    remover.add_argument("--json", action="store_true")
    remover.set_defaults(func=run_remove)

    resolver = add_command(actions, "resolve", help="answer an account's (or the root's) gate")
    resolver.add_argument("name", metavar="NAME", nargs="?", help="omit with --root-budget")
    resolver.add_argument("--root-budget", action="store_true", help="the whole root's budget")
    resolver.add_argument("--answer", default="", metavar="TEXT", help="`raise N` for budgets")
    resolver.add_argument("--json", action="store_true")
    resolver.set_defaults(func=run_resolve)

    budget = add_command(actions, "budget", help="set the whole root's budget")
    budget.add_argument("--max-tokens", type=int, metavar="N")
    budget.add_argument("--max-cost-usd", type=float, metavar="F")
    budget.add_argument("--window-hours", type=float, metavar="H")
    budget.add_argument("--json", action="store_true")
    budget.set_defaults(func=run_budget)

    login = add_command(actions, "login", help="log the account's CLI in, into its own directory")
    login.add_argument("name", metavar="NAME")
    login.add_argument(
        "--device-code", action="store_true", help="a device code (or a URL and a pasted code)"
    )
    login.set_defaults(func=run_login)

    checker = add_command(actions, "check", help="one minimal authenticated call through its CLI")
    checker.add_argument("name", metavar="NAME")
    checker.add_argument("--json", action="store_true")
    checker.set_defaults(func=run_check)


def _policy(args: argparse.Namespace) -> dict[str, Any]:
    return {name: getattr(args, name) for name in POLICY_OPTIONS} | sandbox_arguments(args)


def run_add(args: argparse.Namespace) -> int:
    """Register an account."""
    document = root(args).accounts.add(
        args.name, host_kind=args.host_kind, env_file=args.env_file, env=args.env, **_policy(args)
    )
    if args.json:
        print_json(document)
    else:
        print(f"added account {document.account.name} ({document.account.host_kind})")
    return exitcodes.OK


def run_edit(args: argparse.Namespace) -> int:
    """Change an account."""
    document = root(args).accounts.edit(
        args.name,
        env_file=args.env_file,
        env=args.env,
        clear_env_file=args.no_env_file,
        **_policy(args),
    )
    if args.json:
        print_json(document)
    else:
        print(f"updated account {document.account.name}")
    return exitcodes.OK


def summary_line(summary: AccountSummary) -> str:
    """One account in one line: name, kind, state and why, spend, goals."""
    from loopx.model import iso_utc  # noqa: PLC0415 - output formatting only

    state = str(summary.state)
    if summary.until is not None and summary.state in ("limited", "overloaded", "budget_spent"):
        state += f" until {iso_utc(summary.until, 'seconds')}"
    spend = ""
    if summary.spend is not None:
        est = " est." if summary.cost_estimated else ""
        spend = (
            f", {summary.spend.tokens:,} tokens ${summary.spend.cost_usd:,.2f}{est} in "
            f"{summary.spend.window_hours:g} h"
        )
    kind = f" ({summary.host_kind})" if summary.host_kind else ""
    waiting = f", {len(summary.waiting)} waiting" if summary.waiting else ""
    name = "the root's budget" if summary.whole_root else summary.name
    line = f"{name}{kind}: {state}{spend}; {len(summary.goals)} goal(s){waiting}"
    return line + (f"\n  {summary.message}" if summary.message else "")


def admission_line(account: Account) -> str:
    """``until 95% of each window (weekly: 80%); goals above priority 5 still start``."""
    policy = account.admission
    until = f"{policy.until_percent:g}%" if policy.until_percent is not None else "off"
    own = ", ".join(
        f"{name}: {f'{mark:g}%' if mark is not None else 'off'}"
        for name, mark in sorted(policy.windows.items())
    )
    past = (
        f"goals above priority {policy.past_priority} still start"
        if policy.past_priority is not None
        else "no goal starts past it"
    )
    return f"until {until} of each window{f' ({own})' if own else ''}; {past}"


def window_lines(summary: AccountSummary) -> list[str]:
    """One bar per provider window: ``5-hour [###...] 96% (mark 95%), resets 14:05 UTC``."""
    from loopx.model import iso_utc  # noqa: PLC0415 - output formatting only

    if not summary.windows:
        return []
    lines = ["  windows:"]
    width = max(len(w.label) for w in summary.windows)
    for w in summary.windows:
        filled = min(BAR_WIDTH, round(w.used_percent / 100 * BAR_WIDTH))
        bar = "#" * filled + "-" * (BAR_WIDTH - filled)
        mark = f" (mark {w.mark:g}%)" if w.mark is not None else " (no mark)"
        resets = f", resets {iso_utc(w.resets_at, 'minutes')}" if w.resets_at is not None else ""
        held = ": holds its goals" if w.past_mark else ""
        lines.append(f"    {w.label:<{width}} [{bar}] {w.used_percent:.0f}%{mark}{resets}{held}")
    return lines


def run_list(args: argparse.Namespace) -> int:
    """List accounts."""
    listing = root(args).accounts.list()
    if args.json:
        print_json(listing)
    else:
        for summary in listing.accounts:
            print(summary_line(summary))
        if not listing.accounts:
            print("no accounts (goals use their host kind's default account)")
    return exitcodes.OK


def run_show(args: argparse.Namespace) -> int:
    """Show one account."""
    shown = root(args).accounts.show(args.name)
    if args.json:
        print_json(shown)
        return exitcodes.OK
    print(summary_line(shown.summary))
    if shown.account is not None:
        account = shown.account
        print(f"  env file: {account.env_file or '-'}; env: {sorted(account.env) or '-'}")
        print(f"  on limit: {account.on_limit}, max limit waits: {account.max_limit_waits}")
        print(f"  admission: {admission_line(account)}")
    for line in window_lines(shown.summary):
        print(line)
    if shown.summary.goals:
        print(f"  goals: {', '.join(shown.summary.goals)}")
    return exitcodes.OK


def run_remove(args: argparse.Namespace) -> int:
    """Remove an account."""
    document = root(args).accounts.remove(args.name)
    if args.json:
        print_json(document)
    else:
        print(f"removed account {document.account.name}")
    return exitcodes.OK


def run_resolve(args: argparse.Namespace) -> int:
    """Answer an account's gate."""
    if (args.name is None) == (not args.root_budget):
        from loopx.errors import UsageError  # noqa: PLC0415 - a refusal path

        msg = "name an account, or pass --root-budget (not both)"
        raise UsageError(msg, hint="loopx account resolve NAME --answer TEXT")
    summary = root(args).accounts.resolve(args.name, answer=args.answer)
    if args.json:
        print_json(summary)
    else:
        print(summary_line(summary))
    return exitcodes.OK


def run_budget(args: argparse.Namespace) -> int:
    """Set the root's budget."""
    record = root(args).accounts.set_root_budget(
        max_tokens=args.max_tokens, max_cost_usd=args.max_cost_usd, window_hours=args.window_hours
    )
    if args.json:
        print_json(record)
    else:
        b = record.budget
        print(f"root budget: tokens {b.max_tokens}, cost {b.max_cost_usd}, {b.window_hours:g} h")
    return exitcodes.OK


def run_login(args: argparse.Namespace) -> int:
    """Run the account's CLI login on this terminal; exit with the CLI's code."""
    code = root(args).accounts.login(args.name, device_code=args.device_code)
    if code == exitcodes.OK:
        print(f"logged in; `loopx account check {args.name}` confirms it and reopens the account")
    else:
        print(f"the CLI's login exited {code}; nothing changed")
    return code


def run_check(args: argparse.Namespace) -> int:
    """One call through the account's CLI: 0 when it got through, 4 when the login was refused."""
    from loopx.accounts.outputs import CheckOutcome  # noqa: PLC0415 - the result's enum only

    found = root(args).accounts.check(args.name)
    if args.json:
        print_json(found)
    else:
        state = f" (account {found.state})" if found.state is not None else ""
        print(f"{found.name}: {found.outcome}{state}: {found.message}")
    if found.outcome is CheckOutcome.OK:
        return exitcodes.OK
    return exitcodes.NEEDS_HUMAN if found.outcome is CheckOutcome.AUTH else exitcodes.FAILURE
