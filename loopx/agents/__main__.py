"""`python -m loopx.agents run --root R --agent-id A [--max-turns N] [--once]`: one agent process."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from loopx import exitcodes
from loopx.agents.loop import run_agent
from loopx.errors import LoopxError, resource_fault
from loopx.fleet import AgentConfig
from loopx.ids import validate_goal_id
from loopx.log import configure_logging
from loopx.root import ResolvedRoot, RootSource, open_root


def add_agent_options(parser: argparse.ArgumentParser) -> None:
    """The options of `agent run` (shared with `loopx agent run`)."""
    parser.add_argument("--agent-id", required=True, metavar="ID", help="this agent's id")
    parser.add_argument("--max-turns", type=int, metavar="N", help="exit after N turns")
    parser.add_argument(
        "--once", action="store_true", help="one step (at most one turn), then exit"
    )
    parser.add_argument(
        "--heartbeat-seconds", type=float, default=2.0, metavar="S", help="heartbeat period"
    )
    parser.add_argument(
        "--idle-max-seconds",
        type=float,
        default=2.0,
        metavar="S",
        help="longest idle sleep while a goal is eligible but lost, or another agent holds a lease",
    )
    parser.add_argument("--parent-pid", type=int, metavar="PID", help="stop when PID is gone")
    parser.add_argument(
        "--parent-started-at", type=float, metavar="T", help="psutil create_time of --parent-pid"
    )


def config_of(args: argparse.Namespace) -> AgentConfig:
    """The agent config the parsed options describe."""
    return AgentConfig(
        agent_id=validate_goal_id(args.agent_id),
        max_turns=args.max_turns,
        once=args.once,
        heartbeat_s=args.heartbeat_seconds,
        idle_max_s=args.idle_max_seconds,
        parent_pid=args.parent_pid,
        parent_started_at=args.parent_started_at,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Parse and run one agent."""
    parser = argparse.ArgumentParser(prog="python -m loopx.agents")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run the agent loop")
    run.add_argument("--root", required=True, metavar="DIR", help="runtime root")
    run.add_argument("--registry", metavar="FILE", help="registry (default: <root>/registry.json)")
    run.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    add_agent_options(run)
    args = parser.parse_args(argv)
    configure_logging(level=args.log_level)
    try:
        root = Path(args.root).resolve()
        registry = Path(args.registry).resolve() if args.registry else root / "registry.json"
        layout = open_root(ResolvedRoot(root, registry, RootSource.FLAG), create=False)
        return run_agent(layout, config_of(args))
    except LoopxError as e:
        print(f"loopx agent: error: {e.message}", file=sys.stderr)
        if e.hint:
            print(f"hint: {e.hint}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:  # pragma: no cover - handlers catch SIGINT
        return exitcodes.OK
    except OSError as e:
        reason = resource_fault(e)
        if reason is None:
            raise
        print(f"loopx agent: error: {reason}; the supervisor restarts this agent", file=sys.stderr)
        return exitcodes.FAILURE


if __name__ == "__main__":
    sys.exit(main())
