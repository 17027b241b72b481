"""`loopx status` (the attention queue) and `loopx refresh` (update its cache)."""

from __future__ import annotations

import argparse
import gc
import os
import signal
import sys
import time
from datetime import UTC, datetime

from loopx import exitcodes, process
from loopx.cli import leave_heap_to_os
from loopx.cli._common import Subparsers, add_command, configure_logging, root, stored_answer

# `loopx status --json` on a warm cache prints a stored document with the standard
# library only (to start within 3x of a bare Python), not even `typing`; the
# rest is imported when a command needs it.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from rich.console import Group

    from loopx.status.view import GoalStatusView, StatusProjection

DEFAULT_TTL_S = 5.0  # loopx.status.cache.DEFAULT_TTL_S (a test checks they agree)
ACTORS = ("agent", "human", "none")  # loopx.status.view.Actor (a test checks they agree)
_SECONDS_UNTIL_S = 120  # "in 90s" below this, minutes above
_MINUTES_UNTIL_S = 7200  # minutes below this, hours above


def utcnow() -> datetime:
    """The time relative times are shown against."""
    return datetime.now(UTC)


_ACTOR_STYLE = {"human": "bold red", "agent": "green", "none": "dim"}


def register(sub: Subparsers) -> None:
    """Add `status` and `refresh`."""
    status = add_command(sub, "status", help="who must act next on each goal, and why")
    status.add_argument("--json", action="store_true", help="print the projection as JSON")
    status.add_argument(
        "--watch",
        nargs="?",
        type=float,
        const=2.0,
        metavar="SECONDS",
        help="redraw every SECONDS (default 2) until interrupted",
    )
    status.add_argument("--clear-cache", action="store_true", help="rebuild the cache from scratch")
    status.add_argument(
        "--ttl",
        type=float,
        default=DEFAULT_TTL_S,
        metavar="SECONDS",
        help=f"use the cached projection when younger than this (default {DEFAULT_TTL_S:g})",
    )
    status.add_argument(
        "--full-scan-after",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="when refreshing, check every goal's files if the last full check is older "
        "(default 0: always)",
    )
    status.add_argument("--actor", choices=ACTORS, help="show only goals this actor must act on")
    status.add_argument("--limit", type=int, metavar="N", help="show at most N goals")
    status.set_defaults(func=run_status, configures_logging=True)

    refresh = add_command(sub, "refresh", help="refresh the cached status projection now")
    refresh.add_argument("--full", action="store_true", help="check every goal's files")
    refresh.add_argument("--json", action="store_true")
    refresh.set_defaults(func=run_refresh, configures_logging=True)


def _when(value: datetime | None, now: datetime) -> str:
    if value is None:
        return "-"
    delta = (value - now).total_seconds()
    span = abs(delta)
    text = (
        f"{span:.0f}s"
        if span < _SECONDS_UNTIL_S
        else f"{span / 60:.0f}m"
        if span < _MINUTES_UNTIL_S
        else f"{span / 3600:.1f}h"
    )
    return f"in {text}" if delta > 0 else f"{text} ago"


def _last(view: GoalStatusView, now: datetime) -> str:
    t = view.last_turn
    if t is None:
        return "-"
    what = t.kind.value if t.kind is not None else f"{t.status}:{t.failure or '?'}"
    return f"#{t.seq} {what} {_when(t.ended_at, now)}"


def _quota(view: GoalStatusView) -> str:
    q = view.quota
    return f"{q.spent_wall_s / 60:.0f}/{q.allowance_wall_s / 60:.0f}m"


def _header(p: StatusProjection) -> str:
    from loopx.model import iso_utc  # noqa: PLC0415 - see the imports above

    c = p.counts.by_actor
    fleet = p.fleet
    sup = f"supervisor {fleet.state}" if fleet.state else "no supervisor"
    loop = f", crash loop: {', '.join(fleet.crash_loop_agents)}" if fleet.crash_loop_agents else ""
    loop += f", DEGRADED: {fleet.degraded}" if fleet.degraded else ""
    return (
        f"{p.counts.total} goals: {c.get('human', 0)} need a human, {c.get('agent', 0)} for agents, "
        f"{c.get('none', 0)} quiet | {sup}, {fleet.agents_alive}/{fleet.agents_wanted} agents alive"
        f"{loop} | checked {iso_utc(p.checked_at, 'seconds')}"
    ) + "".join(f"\nneeds you: {i.kind}: {i.explanation}" for i in fleet.incidents)


def _account_lines(p: StatusProjection) -> list[str]:
    """One line per account that holds goals back or keeps a budget."""
    lines = []
    for a in p.accounts:
        if not a.message and a.spend is None:
            continue
        kind = f" ({a.host_kind})" if a.host_kind else ""
        spend = ""
        if a.spend is not None:
            est = " est." if a.cost_estimated else ""
            spend = f", {a.spend.tokens:,} tokens ${a.spend.cost_usd:,.2f}{est} in {a.spend.window_hours:g} h"
        waiting = f", {len(a.waiting)} goal(s) waiting" if a.waiting else ""
        who = "the root's budget" if a.whole_root else f"account {a.name}"
        lines.append(f"{who}{kind}: {a.state}{spend}{waiting}: {a.message or 'ok'}")
    return lines


def render_table(p: StatusProjection, now: datetime) -> Group:
    """The TTY rendering: a header line, the queue as a table, then warnings."""
    from rich.console import Group  # noqa: PLC0415 - see the imports above
    from rich.table import Table  # noqa: PLC0415
    from rich.text import Text  # noqa: PLC0415

    table = Table(show_edge=False, pad_edge=False, expand=False)
    for name in ("actor", "goal", "reason", "eligible", "lease", "last turn", "quota", "why"):
        table.add_column(name, overflow="fold", no_wrap=name in {"actor", "reason"})
    warnings: list[str] = []
    for v in p.goals:
        lease = f"{v.lease.agent_id} e{v.lease.epoch}" if v.lease else "-"
        table.add_row(
            Text(v.actor.value, style=_ACTOR_STYLE[v.actor.value]),
            v.goal_id + (" !" if v.warnings else ""),
            v.reason.value,
            _when(v.next_eligible_at, now),
            lease,
            _last(v, now),
            _quota(v),
            _why(v),
        )
        warnings.extend(f"{v.goal_id}: {w}" for w in v.warnings)
    parts: list[Any] = [Text(_header(p), style="bold"), table]
    if warnings:
        parts.append(Text("warnings:\n" + "\n".join(f"  ! {w}" for w in warnings), style="yellow"))
    parts.extend(Text(line) for line in _account_lines(p))
    return Group(*parts)


def _why(v: GoalStatusView) -> str:
    """The explanation, and the last done-check's result when the goal has one."""
    check = v.last_check
    return v.explanation if check is None else f"{v.explanation}; done-check {check.summary}"


def render_plain(p: StatusProjection, now: datetime) -> str:
    """The non-TTY rendering: a header row, then one aligned line per goal; grep-friendly."""
    lines = [_header(p)]
    rows = [(v.actor.value, v.goal_id, v.reason.value, _last(v, now), _why(v)) for v in p.goals]
    if rows:
        head = ("actor", "goal", "reason", "last turn", "why")
        widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head) - 1)]
        for row, view in zip([head, *rows], [None, *p.goals], strict=True):
            cells = [cell.ljust(w) for cell, w in zip(row, widths, strict=False)]
            lines.append("  ".join([*cells, row[-1]]).rstrip())
            if view is not None:
                lines.extend(f"  ! {w}" for w in view.warnings)
    elif p.counts.total:
        lines.append(f"no goal matches the filter ({p.counts.total} goals in all)")
    else:
        lines.append("no goals; add one with `loopx goal add ID --objective TEXT`")
    return "\n".join([*lines, *_account_lines(p)])


def _load(args: argparse.Namespace) -> StatusProjection:
    return root(args).status.project(
        ttl_s=args.ttl, full_scan_after_s=args.full_scan_after, actor=args.actor, limit=args.limit
    )


def _print_document(args: argparse.Namespace) -> None:
    """Every goal's status as JSON: the stored memo while it holds, else from the cache."""
    where = {"path": args.root, "registry": args.registry}
    if not args.clear_cache and stored_answer(args, "status", **where, ttl_s=args.ttl) is not None:
        return
    # One pass over every goal whose objects all live until the process exits: the
    # cyclic collector would only rescan them, at exit too (a fifth of a cold run).
    gc.disable()
    configure_logging(args)
    status = root(args).status
    if args.clear_cache:
        status.clear_cache()
    document = status.document(ttl_s=args.ttl, full_scan_after_s=args.full_scan_after)
    sys.stdout.flush()
    sys.stdout.buffer.write(document)
    gc.freeze()
    leave_heap_to_os()


def run_status(args: argparse.Namespace) -> int:
    """Print (or keep redrawing) the attention queue."""
    if args.json and args.watch is None and args.actor is None and args.limit is None:
        _print_document(args)
        return exitcodes.OK
    configure_logging(args)
    if args.clear_cache:
        root(args).status.clear_cache()
    if args.watch is None:
        projection = _load(args)
        if args.json:
            sys.stdout.write(projection.model_dump_json(indent=2) + "\n")
        elif sys.stdout.isatty():
            from rich.console import Console  # noqa: PLC0415 - see the imports above

            Console().print(render_table(projection, utcnow()))
        else:
            print(render_plain(projection, utcnow()))
        if not args.json:
            _print_notify_line(args)
        return exitcodes.OK
    return _watch(args)


WATCH_GRACE_S = 5.0  # after Ctrl-C, the frame being drawn has this long to finish


class _WatchStop:
    """Ctrl-C on `status --watch` records intent; the loop ends after the frame it is drawing.

    A KeyboardInterrupt raised mid-frame (inside a status refresh, or a write to a
    full pipe that nobody reads any more) could leave the process unable to exit:
    the race behind test_watch_redraws_until_interrupted's timeouts. The
    first signal arms a timer: a frame still unfinished after WATCH_GRACE_S (a
    write blocked for good) ends the process at once; a second Ctrl-C does too.
    """

    def __init__(self) -> None:
        self.requested = False

    def handle_signal(self, _signum: int, _frame: object) -> None:
        """SIGINT/SIGTERM: stop after this frame; the second one stops now."""
        if self.requested:
            os._exit(exitcodes.OK)
        self.requested = True
        signal.setitimer(signal.ITIMER_REAL, WATCH_GRACE_S)

    def install(self) -> None:
        """Own SIGINT and SIGTERM; SIGALRM is the grace's end."""
        process.own_sigint(self.handle_signal)
        signal.signal(signal.SIGTERM, self.handle_signal)
        signal.signal(signal.SIGALRM, lambda *_: os._exit(exitcodes.OK))

    def sleep(self, seconds: float) -> None:
        """Sleep ``seconds`` or until a stop is requested."""
        deadline = time.monotonic() + seconds
        while not self.requested and (left := deadline - time.monotonic()) > 0:
            time.sleep(min(left, 0.05))


def _print_notify_line(args: argparse.Namespace) -> None:
    """The notifications' delivery, when it fails (docs/notifications.md): one line under the table."""
    line = root(args).notify.status_line()
    if line is not None:
        print(line)


def _watch(args: argparse.Namespace) -> int:
    interval = max(0.2, args.watch)
    stop = _WatchStop()
    stop.install()
    if sys.stdout.isatty() and not args.json:
        return _watch_live(args, interval, stop)
    while not stop.requested:
        projection = _load(args)
        if stop.requested:
            break
        if args.json:
            sys.stdout.write(projection.model_dump_json() + "\n")
        else:
            print(render_plain(projection, utcnow()) + "\n")
        sys.stdout.flush()
        stop.sleep(interval)
    return exitcodes.OK


def _watch_live(args: argparse.Namespace, interval: float, stop: _WatchStop) -> int:
    """Redraw the table in place; on Ctrl-C erase the live region and print the last one once.

    (Stopping a non-transient Live mid-redraw left a second header behind.)
    """
    from rich.console import Console  # noqa: PLC0415 - see the imports above
    from rich.live import Live  # noqa: PLC0415

    shown = render_table(_load(args), utcnow())
    with Live(shown, auto_refresh=False, screen=False, transient=True) as live:
        while not stop.requested:
            stop.sleep(interval)
            if stop.requested:
                break
            shown = render_table(_load(args), utcnow())
            live.update(shown, refresh=True)
    Console().print(shown)
    return exitcodes.OK


def run_refresh(args: argparse.Namespace) -> int:
    """Refresh the cache now, re-reading only changed goals (all with --full)."""
    configure_logging(args)
    report = root(args).status.refresh(full=args.full)
    if args.json:
        sys.stdout.write(report.model_dump_json(indent=2) + "\n")
    else:
        kind = "full" if report.full_scan else "incremental"
        print(f"refreshed ({kind}): {report.goals} goals, {report.reread} re-read")
    return exitcodes.OK
