"""Host kinds as plug-ins: a separately installed package adds a `--host-kind`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from loopx.agents.hosts import host_for, kind_names
from loopx.agents.hosts.plugins import installed
from loopx.errors import HostUnsupportedError

PLUGIN = Path(__file__).parent / "plugin_host"
pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def plugin_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The echo plug-in installed with pip into a directory of its own (put it on PYTHONPATH).

    A directory rather than this venv, so no other test sees the extra kind.
    """
    target = tmp_path_factory.mktemp("site")
    build = tmp_path_factory.mktemp("build")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
         "--target", str(target), str(PLUGIN)],
        check=True, capture_output=True, cwd=build, timeout=180,
    )  # fmt: skip
    return target


def test_builtin_kinds_are_entry_points():
    """command, demo, codex, claude and gemini are declared in the loopx.hosts group like any plug-in."""
    assert {"command", "demo", "codex", "claude", "gemini"} <= set(installed())
    assert host_for("codex").kind == "codex"


def test_unknown_kind_is_a_clear_error():
    """A kind no package provides names the installed ones."""
    with pytest.raises(HostUnsupportedError, match=r"'nope'.*claude, codex, command, demo, gemini"):
        host_for("nope")
    assert "nope" not in kind_names()


def test_goal_add_refuses_an_uninstalled_kind(cli, tmp_path):
    """`goal add --host-kind` accepts only installed kinds, with a one-line error."""
    proc = cli.run("goal", "add", "g1", "--objective", "x", "--workdir", str(tmp_path),
                   "--host-kind", "echo")  # fmt: skip
    assert proc.returncode != 0
    assert "no host adapter for host kind 'echo'" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_plugin_kind_runs_a_turn(cli, tmp_path, plugin_path):
    """With the echo package installed, a goal of kind echo runs and commits a turn."""
    env = {"PYTHONPATH": str(plugin_path)}
    cli.run("goal", "add", "g1", "--objective", "say hello", "--workdir", str(tmp_path),
            "--host-kind", "echo", check=True, **env)  # fmt: skip
    proc = cli.run("turn", "run-once", "g1", "--json", **env)
    report = json.loads(proc.stdout)["report"]
    assert (report["status"], report["kind"]) == ("committed", "progress"), proc.stdout
    assert report["summary"] == "echo: say hello"
    assert (report["usage"]["input_tokens"], report["usage"]["output_tokens"]) == (3, 2)


def test_a_turn_whose_plugin_is_gone_fails_typed(cli, tmp_path, plugin_path):
    """The registry keeps a goal whose plug-in was uninstalled; its turn fails host_missing."""
    cli.run("goal", "add", "g1", "--objective", "x", "--workdir", str(tmp_path),
            "--host-kind", "echo", check=True, PYTHONPATH=str(plugin_path))  # fmt: skip
    proc = cli.run("turn", "run-once", "g1", "--json")
    report = json.loads(proc.stdout)["report"]
    assert (report["status"], report["failure"]["reason"]) == ("failed", "host_missing")
    assert "no host adapter for host kind 'echo'" in report["failure"]["message"]
