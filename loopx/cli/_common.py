"""Options every command takes, and the small helpers commands share."""

from __future__ import annotations

import argparse
import sys

# Not `from typing import ...`: `loopx --help` imports only argparse (issue 14).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from pydantic import BaseModel

    from loopx.root import Layout, ResolvedRoot


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
        default="warning" if top else argparse.SUPPRESS,
        help="log level of the structured log on stderr (default: warning)",
    )
    return parser


def add_command(
    sub: Any,
    name: str,
    *,
    help: str,
    aliases: tuple[str, ...] = (),
) -> argparse.ArgumentParser:
    """Add a subcommand that accepts the common options."""
    parser: argparse.ArgumentParser = sub.add_parser(
        name, help=help, description=help, parents=[common_options()], aliases=list(aliases)
    )
    return parser


def resolved(args: argparse.Namespace) -> ResolvedRoot:
    """The runtime root the command line and environment select."""
    import os  # noqa: PLC0415 - `loopx --help` imports only argparse
    from pathlib import Path  # noqa: PLC0415

    from loopx.root import resolve_root  # noqa: PLC0415 - `loopx --help` must not need pydantic

    return resolve_root(flag=args.root, registry=args.registry, env=os.environ, home=Path.home())


def layout(args: argparse.Namespace, *, create: bool = False) -> Layout:
    """The checked layout of the selected root (created with ``create``)."""
    from loopx.root import open_root  # noqa: PLC0415 - `loopx --help` must not need pydantic

    return open_root(resolved(args), create=create)


def print_json(document: BaseModel) -> None:
    """Print one JSON document: the stable `--json` output (its model is in `loopx schema`)."""
    sys.stdout.write(document.model_dump_json(indent=2) + "\n")
