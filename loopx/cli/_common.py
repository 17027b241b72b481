"""Options every command takes, and the small helpers commands share."""

from __future__ import annotations

import argparse
import functools
import os
import sys

# Not `from typing import ...`: `loopx --help` imports only argparse, to start fast.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, BinaryIO, NoReturn, TypeAlias

    from pydantic import BaseModel

    from loopx.api import Root

    # What ``add_subparsers()`` returns; argparse names the class privately.
    Subparsers: TypeAlias = argparse._SubParsersAction[argparse.ArgumentParser]  # noqa: SLF001
else:
    Subparsers = argparse._SubParsersAction  # noqa: SLF001 - the same class, unsubscripted


class Parser(argparse.ArgumentParser):
    """argparse with LoopX's error shape: one line, a hint, exit 2 (not a usage dump)."""

    def error(self, message: str) -> NoReturn:
        """Raise the mistake as a UsageError; the CLI prints it like any other."""
        from loopx.errors import UsageError  # noqa: PLC0415 - `loopx --help` imports only argparse

        raise UsageError(message, hint=f"see `{self.prog} --help`")


@functools.cache  # one parent serves all ~50 subcommands: argparse set-up is most of start-up
def common_options(*, top: bool = False) -> argparse.ArgumentParser:
    """``--root``/``--runtime-root``, ``--registry`` and ``--log-level``.

    They are accepted before and after the subcommand; below the top level
    their default is SUPPRESS so a value given earlier is not overwritten.
    """
    parser = argparse.ArgumentParser(add_help=False)
    default: Any = None if top else argparse.SUPPRESS
    parser.add_argument(
        "--root",
        "--runtime-root",
        dest="root",
        metavar="DIR",
        default=default,
        help="runtime root (default: $LOOPX_ROOT, the registry's common_runtime_root, "
        "or $XDG_STATE_HOME/loopx)",
    )
    parser.add_argument(
        "--registry",
        metavar="FILE",
        default=default,
        help="registry file to use (default: <root>/registry.json)",
    )
    parser.add_argument(
        "--log-level",
        choices=["debug", "info", "warning", "error"],
        default=None if top else argparse.SUPPRESS,
        help="log level of the structured log on stderr (default: warning; "
        "info for the supervisor, whose log is its product)",
    )
    return parser


def add_command(
    sub: Subparsers,
    name: str,
    *,
    help: str,  # noqa: A002 - argparse's name
    aliases: tuple[str, ...] = (),
) -> argparse.ArgumentParser:
    """Add a subcommand that accepts the common options."""
    parser: argparse.ArgumentParser = sub.add_parser(
        name, help=help, description=help, parents=[common_options()], aliases=list(aliases)
    )
    return parser


AGENTS_PER_CPU = 4  # agents mostly wait on their host program, so a few per CPU is sane


def default_max_agents() -> int:
    """The default bound on ``--agents``: a few per CPU of this machine."""
    return AGENTS_PER_CPU * (os.cpu_count() or 1)


def add_agent_options(parser: argparse.ArgumentParser, *, default: int, what: str) -> None:
    """``--agents N`` and ``--max-agents N``, the bound that keeps a typo from forking thousands."""
    parser.add_argument(
        "--agents", type=int, default=default, metavar="N", help=f"{what} (default {default})"
    )
    parser.add_argument(
        "--max-agents",
        type=int,
        metavar="N",
        help=f"refuse --agents above N (default {AGENTS_PER_CPU} per CPU: {default_max_agents()})",
    )


def check_agents(
    args: argparse.Namespace, *, count: int | None = None, flag: str = "--agents"
) -> int:
    """The checked agent count: at least 1 and at most ``--max-agents``.

    Raises:
        UsageError: the count is below 1 or above the bound.
    """
    from loopx.errors import UsageError  # noqa: PLC0415 - `loopx --help` imports only argparse

    n = args.agents if count is None else count
    limit = args.max_agents if args.max_agents is not None else default_max_agents()
    if n < 1:
        raise UsageError(
            f"{flag} must be at least 1, got {n}",
            hint="an agent runs the goals; pass --agents 1 or more",
        )
    if n > limit:
        raise UsageError(
            f"{flag} {n} is more than {limit} ({AGENTS_PER_CPU} per CPU on this machine)",
            hint=f"pass --max-agents {n} as well if you really mean {n} agent processes",
        )
    return n


def root(args: argparse.Namespace, *, create: bool = False) -> Root:
    """The API's handle on the selected root (created with ``create``)."""
    from loopx.api import Root  # noqa: PLC0415 - `loopx --help` must not need pydantic

    return Root.open(args.root, create=create, registry=args.registry)


def stored_answer(
    args: argparse.Namespace, call: str, **arguments: str | float | None
) -> int | None:
    """Print the stored answer ``call`` finds (``loopx.api.warm_call``); its exit code, or None.

    The call is also set as ``args.warm``: the CLI remembers it under this
    command line, whose next run makes it before argparse (``loopx.cli.warm_answer``).
    """
    from loopx.api import warm_call  # noqa: PLC0415 - standard library only

    args.warm = (call, arguments)
    sys.stdout.flush()
    try:
        out: int | BinaryIO = sys.stdout.fileno()
    except (OSError, ValueError):  # not a file (a test's capture): write through Python
        out = sys.stdout.buffer
    return warm_call(call, arguments, out=out)


def configure_logging(args: argparse.Namespace) -> None:
    """Configure structlog for a command (``--log-level``, default warning).

    The CLI does it before running a command, except for commands registered with
    ``configures_logging=True``, which call this only on the path that logs: a
    warm `loopx status --json` prints a stored document without importing structlog.
    """
    from loopx.api import configure_logging as configure  # noqa: PLC0415 - structlog is heavy

    configure(level=getattr(args, "log_level", None) or "warning")


def print_json(document: BaseModel) -> None:
    """Print one JSON document: the stable `--json` output (its model is in `loopx schema`)."""
    sys.stdout.write(document.model_dump_json(indent=2) + "\n")
