"""Parse, dispatch, and turn a LoopxError into one line, a hint and an exit code."""

from __future__ import annotations

import argparse
import importlib.metadata
import sys
from collections.abc import Sequence

from loopx import exitcodes
from loopx.cli import (
    _agent,
    _archive,
    _batch,
    _demo,
    _doctor,
    _gate,
    _goal,
    _init,
    _journal,
    _probe,
    _quota,
    _recover,
    _replay,
    _schema,
    _serve,
    _status,
    _supervisor,
    _turn,
)
from loopx.cli._common import Parser, common_options
from loopx.errors import LoopxError, ResourceFaultError, resource_fault
from loopx.log import configure_logging

# Each module adds its subcommands; listed explicitly so the CLI's surface is visible here.
COMMAND_MODULES = (
    _init,
    _goal,
    _gate,
    _quota,
    _schema,
    _agent,
    _supervisor,
    _batch,
    _status,
    _serve,
    _archive,
    _probe,
    _turn,
    _journal,
    _recover,
    _demo,
    _replay,
    _doctor,
)


def build_parser() -> Parser:
    """The whole `loopx` argument parser."""
    parser = Parser(
        prog="loopx",
        description="Run long-lived AI agent work unattended, crash-safe by journal.",
        parents=[common_options(top=True)],
    )
    parser.add_argument("--version", action="version", version=f"loopx {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in COMMAND_MODULES:
        module.register(sub)
    return parser


def _version() -> str:
    try:
        return importlib.metadata.version("loopx")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _report(message: str, hint: str | None) -> None:
    print(f"loopx: error: {message}", file=sys.stderr)
    if hint:
        print(f"hint: {hint}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `loopx` console script; returns the exit code."""
    args: argparse.Namespace | None = None
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        configure_logging(level=args.log_level or "warning")
        code: int = args.func(args)
    except LoopxError as e:
        return _error(e)
    except KeyboardInterrupt:
        print("loopx: interrupted", file=sys.stderr)
        return exitcodes.INTERRUPTED
    except BrokenPipeError:
        # The reader went away (`loopx goal list | head`); nothing more to say.
        return exitcodes.OK
    except OSError as e:
        reason = resource_fault(e)
        if reason is not None:
            command = getattr(args, "command", None) if args is not None else None
            return _error(ResourceFaultError(reason, f"finish `loopx {command or '...'}`"))
        # The last net for a file the user pointed at (a directory given as a file,
        # a path under a file, a permission): one line, never a traceback.
        where = f": {e.filename}" if e.filename else ""
        _report(
            f"{e.strerror or e}{where}",
            "check the path and its permissions; `loopx doctor` describes the root",
        )
        return exitcodes.FAILURE
    return code


def _error(e: LoopxError) -> int:
    """Print the error's one line and hint; return its exit code."""
    _report(e.message, e.hint)
    return e.exit_code


def run() -> None:
    """Console-script wrapper: exit with :func:`main`'s code."""
    sys.exit(main())
