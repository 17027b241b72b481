"""`loopx supervisor run|start|stop|status|attach|scale` (also spelled `loopx daemon ...`)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from loopx import exitcodes
from loopx.batch.report import Outcome
from loopx.cli._common import (
    Subparsers,
    add_agent_options,
    add_command,
    check_agents,
    print_json,
    root,
)

if TYPE_CHECKING:
    from loopx.api import FleetOptions
    from loopx.batch.report import RunSummary


def _run_options(parser: argparse.ArgumentParser) -> None:
    add_agent_options(parser, default=1, what="agent processes")
    parser.add_argument(
        "--visible",
        choices=["none", "tmux"],
        default="none",
        help="tmux: one tmux window per agent (`loopx supervisor attach`); none: logs/agent-<n>.log",
    )
    parser.add_argument(
        "--until-idle",
        action="store_true",
        help="exit when no goal can progress: 0 all done, 4 some wait for a human/quota, 1 some failed",
    )
    parser.add_argument(
        "--stop-grace-seconds",
        type=float,
        default=30.0,
        metavar="S",
        help="on SIGTERM, how long agents get to stop their turns before SIGKILL (default 30)",
    )
    parser.add_argument(
        "--refresh-interval-seconds",
        type=float,
        default=5.0,
        metavar="S",
        help="how often the status projection is refreshed (default 5)",
    )
    parser.add_argument(
        "--status-projection-cache-ttl-seconds",
        type=float,
        default=5.0,
        metavar="S",
        help="TTL of the status projection cache used by the refresh (default 5)",
    )
    parser.add_argument(
        "--heartbeat-seconds", type=float, default=2.0, metavar="S", help=argparse.SUPPRESS
    )
    parser.add_argument(
        "--stall-seconds",
        type=float,
        default=60.0,
        metavar="S",
        help="an agent whose heartbeat is older than this is killed and restarted (default 60)",
    )
    parser.add_argument(
        "--idle-horizon-seconds",
        type=float,
        default=60.0,
        metavar="S",
        help="--until-idle: a goal eligible again within this counts as progressing (default 60)",
    )
    parser.add_argument(
        "--agent-max-turns", type=int, metavar="N", help="recycle an agent after N turns"
    )
    parser.add_argument(
        "--crash-loop-restarts", type=int, default=5, metavar="N", help=argparse.SUPPRESS
    )
    parser.add_argument(
        "--crash-loop-window-seconds",
        type=float,
        default=120.0,
        metavar="S",
        help=argparse.SUPPRESS,
    )
    parser.add_argument(
        "--restart-max-seconds", type=float, default=60.0, metavar="S", help=argparse.SUPPRESS
    )
    parser.add_argument(
        "--backend",
        choices=["local", "ray"],
        default="local",
        help="where agents run: local processes (default) or Ray actors (pip install 'loopx[ray]')",
    )
    parser.add_argument(
        "--ray-address",
        metavar="ADDR",
        help="--backend ray: the cluster to join (host:port or 'auto'); default a private local one",
    )
    parser.add_argument(
        "--agent-cpus",
        type=float,
        default=1.0,
        metavar="F",
        help="--backend ray: CPUs each agent actor reserves (default 1)",
    )
    parser.add_argument(
        "--agent-memory-mb",
        type=int,
        metavar="N",
        help="--backend ray: memory each agent actor reserves, in MB",
    )


def register(sub: Subparsers) -> None:
    """Add `supervisor` and its alias `daemon`."""
    for name in ("supervisor", "daemon"):
        top = add_command(sub, name, help="run and control the agent fleet of a root")
        actions = top.add_subparsers(dest="action", metavar="ACTION", required=True)

        run = add_command(actions, "run", help="run the supervisor in the foreground")
        _run_options(run)
        run.add_argument(
            "--json", action="store_true", help="print the run's summary as JSON when it ends"
        )
        run.set_defaults(func=run_run)

        start = add_command(
            actions, "start", help="run the supervisor in the background (logs/supervisor.log)"
        )
        _run_options(start)
        start.add_argument("--json", action="store_true")
        start.set_defaults(func=run_start)

        stop = add_command(actions, "stop", help="stop the running supervisor and its whole fleet")
        stop.add_argument("--timeout", type=float, metavar="S", help="wait at most S seconds")
        stop.add_argument("--force", action="store_true", help="do not wait for turns to stop")
        stop.add_argument("--json", action="store_true")
        stop.set_defaults(func=run_stop)

        status = add_command(
            actions, "status", help="show the supervisor, its agents and crash loops"
        )
        status.add_argument("--json", action="store_true")
        status.set_defaults(func=run_status)

        attach = add_command(actions, "attach", help="attach to the visible (tmux) fleet")
        attach.set_defaults(func=run_attach)

        scale = add_command(
            actions, "scale", help="change the number of agents of the running supervisor"
        )
        scale.add_argument("agents", type=int, metavar="N", help="0 stops every agent")
        scale.add_argument("--max-agents", type=int, metavar="N", help="refuse N above this")
        scale.add_argument("--json", action="store_true")
        scale.set_defaults(func=run_scale)


def _options(args: argparse.Namespace) -> FleetOptions:
    """The run options on the command line, checked before the root is opened."""
    from loopx.api import Fleet  # noqa: PLC0415 - not needed by `--help`

    check_agents(args)
    options: FleetOptions = {
        "agents": args.agents,
        "visible": args.visible,
        "until_idle": args.until_idle,
        "stop_grace_s": args.stop_grace_seconds,
        "refresh_interval_s": args.refresh_interval_seconds,
        "status_cache_ttl_s": args.status_projection_cache_ttl_seconds,
        "heartbeat_s": args.heartbeat_seconds,
        "stall_s": args.stall_seconds,
        "idle_horizon_s": args.idle_horizon_seconds,
        "agent_max_turns": args.agent_max_turns,
        "crash_loop_restarts": args.crash_loop_restarts,
        "crash_loop_window_s": args.crash_loop_window_seconds,
        "restart_max_s": args.restart_max_seconds,
        "backend": args.backend,
        "ray_address": args.ray_address,
        "agent_cpus": args.agent_cpus,
        "agent_memory_mb": args.agent_memory_mb,
        "log_level": args.log_level or "info",
    }
    Fleet.check_options(**options)
    return options


def run_run(args: argparse.Namespace) -> int:
    """Run the supervisor in the foreground until stopped (or idle)."""
    from loopx.api import configure_logging  # noqa: PLC0415

    options = _options(args)
    fleet = root(args).fleet
    # The supervisor's log is its product (journald, logs/supervisor.log): info by default.
    configure_logging(level=options["log_level"], force=True)
    if not (args.json or sys.stdout.isatty()):
        return fleet.run_service(**options)  # under a service manager: no summary to wait for
    summary = fleet.run(**options)
    if args.json:
        print_json(summary)
    else:
        print(render_summary(summary))
    return summary.exit_code


def render_summary(summary: RunSummary) -> str:
    """The plain summary a person reads at the end of a run in a terminal. Pure."""
    g = summary.goals
    waiting = g[Outcome.NEEDS_HUMAN] + g[Outcome.UNFINISHED] + g[Outcome.PAUSED]
    minutes, seconds = divmod(round(summary.wall_s), 60)
    lines = [
        (
            f"loopx: supervisor stopped (exit {summary.exit_code}) after "
            f"{minutes}m{seconds:02d}s; {summary.turns} turns ran ({summary.failed_turns} failed)"
        ),
        (
            f"  goals: {g[Outcome.COMPLETED]} done, {waiting} waiting "
            f"({g[Outcome.NEEDS_HUMAN]} for a human, {g[Outcome.UNFINISHED]} unfinished, "
            f"{g[Outcome.PAUSED]} paused), {g[Outcome.FAILED]} failed"
        ),
    ]
    if g[Outcome.NEEDS_HUMAN]:
        lines.append(f"  next: `loopx status --root {summary.root} --actor human`")
    return "\n".join(lines)


def run_start(args: argparse.Namespace) -> int:
    """Start the supervisor detached (bad options are refused here, not in its log)."""
    fleet = root(args).fleet
    started = fleet.start(**_options(args))
    record = started.supervisor
    if args.json:
        print_json(started)
    else:
        print(
            f"supervisor started: pid {record.pid}, {record.agents_wanted} agents; log {fleet.layout.logs_dir / 'supervisor.log'}"
        )
    return exitcodes.OK


def run_stop(args: argparse.Namespace) -> int:
    """Stop the running supervisor."""
    stopped = root(args).fleet.stop(timeout_s=args.timeout, force=args.force)
    record = stopped.supervisor
    if args.json:
        print_json(stopped)
    elif record is None:
        print("no supervisor is running")
    else:
        print(f"supervisor pid {record.pid} stopped (exit code {record.exit_code})")
    return exitcodes.OK


def run_status(args: argparse.Namespace) -> int:
    """Show the supervisor and agents."""
    doc = root(args).fleet.status()
    if args.json:
        print_json(doc)
        return exitcodes.OK
    sup = doc.supervisor
    if sup is None:
        print("no supervisor has run on this root")
        return exitcodes.OK
    state = sup.state if doc.running else f"not running (last state {sup.state})"
    print(
        f"supervisor pid {sup.pid}: {state}; {sup.agents_wanted} agents wanted; "
        f"visible {sup.visible}"
    )
    if doc.crash_loop:
        print("CRASH LOOP: an agent keeps dying; see logs/agent-<n>.log")
    beats = {a.agent_id: a for a in doc.agents}
    for slot in sup.slots:
        beat = beats.get(slot.agent_id)
        current = beat is not None and beat.pid == slot.pid
        phase = beat.phase if beat is not None and current else "-"
        goal = (beat.goal_id if beat is not None else None) or ""
        flag = "  CRASH LOOP" if slot.crash_loop else ""
        ended = slot.last_exit.describe() if slot.last_exit else ""
        node = f"node {slot.ray.node_ip} {slot.ray.node_id[:8]}  " if slot.ray else ""
        print(
            f"  {slot.agent_id:<10} pid {slot.pid or '-':<8} {phase:<9} {goal:<20} "
            f"{node}restarts {slot.restarts}{flag}  {ended}".rstrip()
        )
    return exitcodes.OK


def run_attach(args: argparse.Namespace) -> int:
    """Attach to the tmux session (replaces this process)."""
    root(args).fleet.attach()


def run_scale(args: argparse.Namespace) -> int:
    """Ask the running supervisor for N agents."""
    if args.agents != 0:  # 0 is allowed here: it parks the fleet until the next scale
        check_agents(args, flag="agent count")
    result = root(args).fleet.scale(args.agents)
    if args.json:
        print_json(result)
    elif not result.signalled:
        print(
            f"wanted agents set to {args.agents}; no supervisor is running (its --agents decides at start)"
        )
    else:
        print(
            f"asked supervisor pid {result.supervisor_pid} for {args.agents} agents (SIGHUP sent)"
        )
    return exitcodes.OK
