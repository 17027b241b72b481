"""`loopx notify add|list|set|remove|test`: Apprise URLs that hear about gates, failures and more."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from loopx import exitcodes
from loopx.cli._common import Subparsers, add_command, print_json, root

if TYPE_CHECKING:
    from loopx.notify.targetviews import NotifyList

EVENTS_HELP = (
    "comma-separated: gate,failing,crash_loop,limit,budget,done,disk,supervisor,host (default: all)"
)


def register(sub: Subparsers) -> None:
    """Add `notify add|list|set|remove|test`."""
    notify = add_command(
        sub, "notify", help="send gates, failures and other events to chat, mail or webhooks"
    )
    actions = notify.add_subparsers(dest="action", metavar="ACTION", required=True)

    adder = add_command(actions, "add", help="send events to an Apprise URL (stored 0600)")
    adder.add_argument("url", metavar="URL", help="an Apprise URL: json://, ntfy://, slack://, ...")
    adder.add_argument("--events", metavar="LIST", help=EVENTS_HELP)
    adder.add_argument(
        "--link-base", metavar="URL", help="the dashboard's address for links (as `notify set`)"
    )
    adder.add_argument(
        "--read-timeout",
        metavar="S",
        type=float,
        help="seconds the receiver may take to answer (default 15; a retry waits 4x longer)",
    )
    adder.add_argument("--json", action="store_true")
    adder.set_defaults(func=run_add)

    lister = add_command(actions, "list", help="the targets (URLs redacted) and delivery state")
    lister.add_argument("--json", action="store_true")
    lister.set_defaults(func=run_list)

    remover = add_command(actions, "remove", help="stop sending to a target")
    remover.add_argument("target", metavar="ID", help="the id `notify list` shows (or the URL)")
    remover.add_argument("--json", action="store_true")
    remover.set_defaults(func=run_remove)

    setter = add_command(actions, "set", help="where the messages' links point")
    base = setter.add_mutually_exclusive_group(required=True)
    base.add_argument(
        "--link-base", metavar="URL", help="the dashboard's address people open (http(s)://)"
    )
    base.add_argument(
        "--no-link-base", action="store_true", help="none: links use a running `loopx serve`'s"
    )
    setter.add_argument("--json", action="store_true")
    setter.set_defaults(func=run_set)

    tester = add_command(actions, "test", help="send a test message now")
    tester.add_argument("target", metavar="ID", nargs="?", help="only this target")
    tester.add_argument("--json", action="store_true")
    tester.set_defaults(func=run_test)


def run_add(args: argparse.Namespace) -> int:
    """Add a target."""
    api = root(args).notify
    target = api.add(
        args.url, events=args.events, link_base=args.link_base, read_timeout_s=args.read_timeout
    )
    if args.json:
        print_json(api.list())
    else:
        view = next(t for t in api.list().targets if t.id == target.id)
        print(f"notify {view.id}: {view.url} ({','.join(view.events)})")
    return exitcodes.OK


def run_list(args: argparse.Namespace) -> int:
    """List the targets; warn when the links will not open."""
    listing = root(args).notify.list(check_links=True)
    if args.json:
        print_json(listing)
        return exitcodes.OK
    if not listing.targets:
        print("no notification targets (add one with `loopx notify add URL`)")
    for t in listing.targets:
        state = " FAILING" if t.failing else ""
        pending = f" {t.pending} pending" if t.pending else ""
        timeout = f" timeout {t.read_timeout_s:g}s"
        print(f"{t.id}  {t.url}  {','.join(t.events)}{timeout}{pending}{state}")
    _print_links(listing)
    d = listing.delivery
    if d.last_error:
        print(f"last error: {d.last_error} at {d.last_error_at}")
    return exitcodes.OK


def _print_links(listing: NotifyList) -> None:
    print(f"links: {listing.link_base or '(none)'}")
    if listing.link_base_problem:
        print(f"warning: {listing.link_base_problem}", file=sys.stderr)


def run_set(args: argparse.Namespace) -> int:
    """Set where the links point."""
    listing = root(args).notify.set(link_base=None if args.no_link_base else args.link_base)
    if args.json:
        print_json(listing)
    else:
        _print_links(listing)
    return exitcodes.OK


def run_remove(args: argparse.Namespace) -> int:
    """Remove a target."""
    api = root(args).notify
    target = api.remove(args.target)
    if args.json:
        print_json(api.list())
    else:
        print(f"notify {target.id} removed")
    return exitcodes.OK


def run_test(args: argparse.Namespace) -> int:
    """Send a test message."""
    report = root(args).notify.test(args.target)
    if args.json:
        print_json(report)
    else:
        if not report.results:
            print("no notification targets")
        for r in report.results:
            print(f"{r.id}  {r.url}  {'ok' if r.ok else f'FAILED: {r.error}'}")
    ok = all(r.ok for r in report.results)
    return exitcodes.OK if ok else exitcodes.FAILURE
