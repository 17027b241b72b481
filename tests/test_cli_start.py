"""CLI start-up: only the chosen subcommand is imported; the command table is the real surface."""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path

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


def test_quick_commands_import_only_the_layers_they_use(tmp_path: Path) -> None:
    """`quota should-run` and `goal list` load no logging, HTTP, turn or fleet code.

    structlog (and the rich console it pulls in) is imported at a process's
    first log event, and each API group on first use.
    """
    root = tmp_path / "root"
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPX_")}
    for argv in (["init"], ["goal", "add", "g", "--objective", "x", "--host-kind", "demo"]):
        subprocess.run(
            [sys.executable, "-m", "loopx", "--root", str(root), *argv], check=True, env=env
        )
    heavy = ("structlog", "rich", "http.server", "loopx.turn.recovery", "loopx.supervisor")
    for argv in (["quota", "should-run", "g"], ["goal", "list", "--json"]):
        code = (
            "import sys, runpy; sys.argv = ['loopx', *sys.argv[1:]]\n"
            "try:\n    runpy.run_module('loopx', run_name='__main__')\n"
            "except SystemExit:\n    pass\n"
            f"print(sorted(m for m in sys.modules if m.startswith({heavy!r})), file=sys.stderr)"
        )
        proc = subprocess.run(
            [sys.executable, "-c", code, "--root", str(root), *argv],
            capture_output=True, text=True, env=env, check=False,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        assert proc.stderr.strip().splitlines()[-1] == "[]", (argv, proc.stderr)


def test_a_warm_should_run_imports_no_pydantic_psutil_or_structlog(tmp_path: Path) -> None:
    """The second `quota should-run` prints the stored decision with the standard library only.

    Not even argparse: the first run of a command line (each spelling) remembers the
    call it made, and the next run of the same words makes it before parsing anything.
    """
    root = tmp_path / "root"
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPX_")}
    base = [sys.executable, "-m", "loopx", "--root", str(root)]
    for argv in (
        ["init"],
        ["goal", "add", "g", "--objective", "x"],
        ["quota", "should-run", "g"],
        ["quota", "should-run", "g", "--json"],
    ):
        subprocess.run([*base, *argv], check=False, env=env, capture_output=True)
    heavy = ("pydantic", "psutil", "structlog", "argparse")
    for flags in ([], ["--json"]):
        code = (
            "import sys, runpy; sys.argv = ['loopx', *sys.argv[1:]]\n"
            "try:\n    runpy.run_module('loopx', run_name='__main__')\n"
            "except SystemExit as e:\n    code = e.code\n"
            f"print(code, sorted(m for m in sys.modules if m.startswith({heavy!r})), file=sys.stderr)"
        )
        proc = subprocess.run(
            [sys.executable, "-c", code, "--root", str(root), "quota", "should-run", "g", *flags],
            capture_output=True, text=True, env=env, check=False,
        )  # fmt: skip
        assert proc.stderr.strip().splitlines()[-1] == "0 []", (flags, proc.stderr)
        assert proc.stdout.startswith("{" if flags else "yes (ok): ")


def test_cold_status_imports_no_logging_when_nothing_is_worth_logging(tmp_path: Path) -> None:
    """A cold `status --json` logs only a debug event, filtered below warning without structlog.

    Nor does it import the turn journal, the host protocol or the quota decision:
    status reads history lines and spend, and those modules cost milliseconds to
    import. Nor filelock (its locks are free) or psutil (no fleet ever ran here):
    both are imported only when a lock is busy or a recorded pid still exists.
    """
    root = tmp_path / "root"
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPX_")}
    for argv in (["init"], ["goal", "add", "g", "--objective", "x", "--host-kind", "demo"]):
        subprocess.run(
            [sys.executable, "-m", "loopx", "--root", str(root), *argv], check=True, env=env
        )
    heavy = (
        "structlog",
        "rich",
        "http.server",
        "loopx.supervisor",
        "loopx.turn.journal",
        "loopx.turn.protocol",
        "loopx.quota.decision",
        "filelock",
        "psutil",
        "ctypes",
    )
    # main(), not the console script: that one ends a cold status with os._exit.
    code = (
        "import sys; from loopx.cli import main; main(sys.argv[1:])\n"
        f"print(sorted(m for m in sys.modules if m.startswith({heavy!r})), file=sys.stderr)"
    )
    argv = ["--root", str(root), "status", "--json", "--clear-cache"]
    proc = subprocess.run(
        [sys.executable, "-c", code, *argv], capture_output=True, text=True, env=env, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["counts"]["total"] == 1
    assert proc.stderr.strip().splitlines()[-1] == "[]", proc.stderr


WARM_STATUS = ["status", "--json", "--ttl", "300"]


def test_a_warm_status_json_imports_no_pydantic_psutil_structlog_or_typing(tmp_path: Path) -> None:
    """A `status --json` after a cold one prints the stored document with the standard library only.

    Not even `typing` or argparse: a warm status must stay within 3x of a bare Python start;
    the first run of this command line remembered the call it made.
    """
    root = tmp_path / "root"
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPX_")}
    base = [sys.executable, "-m", "loopx", "--root", str(root)]
    for argv in (["init"], ["goal", "add", "g", "--objective", "x"], WARM_STATUS):
        subprocess.run([*base, *argv], check=True, env=env, capture_output=True)
    heavy = ("pydantic", "psutil", "structlog", "filelock", "loopx.model", "argparse")
    code = (
        "import sys, runpy; sys.argv = ['loopx', *sys.argv[1:]]\n"
        "try:\n    runpy.run_module('loopx', run_name='__main__')\n"
        "except SystemExit as e:\n    code = e.code\n"
        "print(code, sorted(m for m in sys.modules\n"
        f"    if m.startswith({heavy!r}) or m == 'typing'), file=sys.stderr)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, "--root", str(root), *WARM_STATUS],
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    assert proc.stderr.strip().splitlines()[-1] == "0 []", proc.stderr
    assert json.loads(proc.stdout)["counts"]["total"] == 1


def test_a_cold_status_leaves_its_heap_to_the_os(tmp_path: Path) -> None:
    """The console script ends a cold `status --json` with os._exit, after flushing its output.

    Python's own exit would free every goal's view one by one (about 30 ms at
    10,000 goals). An atexit hook (installed through sitecustomize) runs only
    after a command that does not ask for this.
    """
    root = tmp_path / "root"
    hook = tmp_path / "hook"
    hook.mkdir()
    marker = tmp_path / "atexit-ran"
    (hook / "sitecustomize.py").write_text(
        f"import atexit, pathlib\natexit.register(pathlib.Path({str(marker)!r}).touch)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPX_")}
    for argv in (["init"], ["goal", "add", "g", "--objective", "x", "--host-kind", "demo"]):
        subprocess.run(
            [sys.executable, "-m", "loopx", "--root", str(root), *argv], check=True, env=env
        )

    def loopx(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "loopx", "--root", str(root), *argv],
            capture_output=True,
            text=True,
            env={**env, "PYTHONPATH": str(hook)},
            check=False,
        )

    listed = loopx("goal", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert marker.exists()  # the hook works: a plain exit runs it
    marker.unlink()
    cold = loopx("status", "--json", "--clear-cache")
    assert cold.returncode == 0, cold.stderr
    assert json.loads(cold.stdout)["counts"]["total"] == 1  # every byte was flushed
    assert not marker.exists()
