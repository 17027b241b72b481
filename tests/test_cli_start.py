"""CLI start-up: only the chosen subcommand is imported; the command table is the real surface."""

from __future__ import annotations

import argparse
import importlib.metadata
import subprocess
import sys

import pytest

from loopx._version import VERSION
from loopx.cli._app import COMMANDS, build_parser, chosen_command, command_module


def test_the_command_table_matches_what_the_modules_register() -> None:
    """Each module registers exactly the table's names (and aliases) for it, with the same help."""
    for name, command in COMMANDS.items():
        parser = argparse.ArgumentParser()
        sub = parser.add_subparsers()
        command_module(name).register(sub)  # type: ignore[attr-defined]
        helps = {a.dest: a.help for a in sub._choices_actions}
        assert helps[name] == command.help, name
        same_module = {
            alias
            for other, c in COMMANDS.items()
            if c.module == command.module
            for alias in (other, *c.aliases)
        }
        assert set(sub.choices) == same_module, name


@pytest.mark.parametrize(
    ("argv", "chosen"),
    [
        (["--root", "goal", "status"], "status"),  # an option's value is not the command
        (["--log-level", "debug", "daemon", "start"], "supervisor"),
        (["--help"], None),
        (["goal", "list"], "goal"),
    ],
)
def test_chosen_command_skips_option_values(argv: list[str], chosen: str | None) -> None:
    """The command is the first word that is neither an option nor an option's value."""
    assert chosen_command(argv) == chosen


def test_help_and_version_import_no_kernel() -> None:
    """`loopx --help` builds its parser without importing pydantic or any command module."""
    code = (
        "import sys; from loopx.cli._app import build_parser; build_parser(['--help']); "
        "print(sorted(m for m in sys.modules if m == 'pydantic' or m.startswith('loopx.cli._')"
        " and m not in ('loopx.cli._app', 'loopx.cli._common')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


def test_version_matches_the_package_metadata() -> None:
    """`loopx --version` prints the installed distribution's version."""
    assert importlib.metadata.version("loopx") == VERSION
    done = subprocess.run(
        [sys.executable, "-m", "loopx", "--version"], capture_output=True, text=True, check=True
    )
    assert done.stdout == f"loopx {VERSION}\n"


def test_a_full_parser_still_parses_every_command() -> None:
    """Without argv every command is registered in full (docs and completion use this)."""
    parser = build_parser()
    args = parser.parse_args(["goal", "import", "f.jsonl"])
    assert args.func.__name__ == "run_import"
