"""`loopx supervisor run|start|stop|status|attach|scale` (also spelled `loopx daemon ...`)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from loopx import exitcodes
from loopx.cli._common import add_agent_options, add_command, check_agents, layout, print_json, root
from loopx.errors import UsageError
from loopx.fleet import (
    Backend,
    Visibility,
)


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


def register(sub: Any) -> None:
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


def _config(args: argparse.Namespace) -> Any:
    from loopx.supervisor.backoff import RestartPolicy  # noqa: PLC0415 - keep `loopx --help` light
    from loopx.supervisor.config import SupervisorConfig  # noqa: PLC0415

    check_agents(args)
    if args.stop_grace_seconds < 0:
        raise UsageError("--stop-grace-seconds must be 0 or more", hint="pass a number of seconds")
    if args.backend != "ray" and (args.ray_address or args.agent_memory_mb is not None):
        raise UsageError(
            "--ray-address and --agent-memory-mb apply to the Ray back-end only",
            hint="add --backend ray",
        )
    if args.backend == "ray" and args.visible != "none":
        raise UsageError(
            "--visible tmux needs local agents", hint="drop --visible or --backend ray"
        )
    if args.agent_cpus < 0 or (args.agent_memory_mb is not None and args.agent_memory_mb <= 0):
        raise UsageError(
            "--agent-cpus must be 0 or more and --agent-memory-mb more than 0",
            hint="pass e.g. --agent-cpus 0.5 --agent-memory-mb 512",
        )
    return SupervisorConfig(
        agents=args.agents,
        visible=Visibility(args.visible),
        until_idle=args.until_idle,
        stop_grace_s=args.stop_grace_seconds,
        refresh_interval_s=args.refresh_interval_seconds,
        status_cache_ttl_s=args.status_projection_cache_ttl_seconds,
        heartbeat_s=args.heartbeat_seconds,
        stall_s=args.stall_seconds,
        idle_horizon_s=args.idle_horizon_seconds,
        agent_max_turns=args.agent_max_turns,
        restart=RestartPolicy(
            max_s=args.restart_max_seconds,
            window_s=args.crash_loop_window_seconds,
            crash_loop_restarts=args.crash_loop_restarts,
        ),
        log_level=args.log_level or "info",
        backend=Backend(args.backend),
        ray_address=args.ray_address,
        agent_cpus=args.agent_cpus,
        agent_memory_mb=args.agent_memory_mb,
    )


def run_run(args: argparse.Namespace) -> int:
    """Run the supervisor in the foreground until stopped (or idle)."""
    from loopx.agents.loop import Agent  # noqa: PLC0415
    from loopx.log import configure_logging  # noqa: PLC0415
    from loopx.model import utcnow  # noqa: PLC0415
    from loopx.supervisor.fleet import Supervisor  # noqa: PLC0415
    from loopx.supervisor.summary import render_summary, summarise  # noqa: PLC0415

    config = _config(args)
    where = layout(args)
    # The supervisor's log is its product (journald, logs/supervisor.log): info by default.
    configure_logging(level=config.log_level, force=True)
    started = utcnow()
    code: int = Supervisor(where, config, make_agent=Agent).run()
    if args.json or sys.stdout.isatty():
        summary = summarise(where, exit_code=code, started_at=started, now=utcnow())
        if args.json:
            print_json(summary)
        else:
            print(render_summary(summary))
    return code


def _run_args(args: argparse.Namespace) -> list[str]:
    out = [
        "--agents",
        str(args.agents),
        "--max-agents",
        str(max(args.agents, 1)),
        "--visible",
        args.visible,
        "--backend",
        args.backend,
    ]
    if args.until_idle:
        out.append("--until-idle")
    if args.log_level is not None:
        out += ["--log-level", args.log_level]
    for flag in (
        "stop_grace_seconds", "refresh_interval_seconds", "status_projection_cache_ttl_seconds",
        "heartbeat_seconds", "stall_seconds", "idle_horizon_seconds", "crash_loop_restarts",
        "crash_loop_window_seconds", "restart_max_seconds", "agent_max_turns",
        "ray_address", "agent_cpus", "agent_memory_mb",
    ):  # fmt: skip
        value = getattr(args, flag)
        if value is not None:
            out += ["--" + flag.replace("_", "-"), str(value)]
    return out


def run_start(args: argparse.Namespace) -> int:
    """Start the supervisor detached."""
    from loopx.supervisor.control import start_detached  # noqa: PLC0415

    _config(args)  # refuse bad options here, not in a detached child's log
    where = layout(args)
    started = start_detached(where, _run_args(args))
    record = started.supervisor
    if args.json:
        print_json(started)
    else:
        print(
            f"supervisor started: pid {record.pid}, {record.agents_wanted} agents; log {where.logs_dir / 'supervisor.log'}"
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
        print(
            f"  {slot.agent_id:<10} pid {slot.pid or '-':<8} {phase:<9} {goal:<20} "
            f"restarts {slot.restarts}{flag}  {ended}".rstrip()
        )
    return exitcodes.OK


def run_attach(args: argparse.Namespace) -> int:
    """Attach to the tmux session (replaces this process)."""
    from loopx.supervisor.control import attach  # noqa: PLC0415

    attach(layout(args))
    return exitcodes.OK  # pragma: no cover - attach execs tmux


def run_scale(args: argparse.Namespace) -> int:
    """Ask the running supervisor for N agents."""
    from loopx.supervisor.control import scale  # noqa: PLC0415

    if args.agents != 0:  # 0 is allowed here: it parks the fleet until the next scale
        check_agents(args, flag="agent count")
    result = scale(layout(args), args.agents)
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
