"""`python -m loopx.agents run --root R --agent-id A [--max-turns N] [--once]`: one agent process."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from loopx import exitcodes
from loopx.agents.loop import run_agent
from loopx.agents.options import add_agent_run_options
from loopx.errors import LoopxError, resource_fault
from loopx.fleet import AgentConfig
from loopx.ids import validate_goal_id
from loopx.log import configure_logging
from loopx.root import ResolvedRoot, RootSource, open_root


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


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``python -m loopx.agents run``."""
    parser = argparse.ArgumentParser(prog="python -m loopx.agents")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run the agent loop")
    run.add_argument("--root", required=True, metavar="DIR", help="runtime root")
    run.add_argument("--registry", metavar="FILE", help="registry (default: <root>/registry.json)")
    run.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    add_agent_run_options(run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse and run one agent."""
    args = build_parser().parse_args(argv)
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
