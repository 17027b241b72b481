"""One rule for exit codes (docs/cli.md): every refusal of a setup the command line names is 2.

Walks the refusal paths that once disagreed: a missing workdir or program, a missing
codex, an unknown host kind with --update, --visible tmux without tmux, a negative
--timeout; and `demo --json`, whose document says the exit code the command returns.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from loopx import exitcodes
from tests.turnkit import cli_env


def _loopx(root: Path, *args: str, path: str | None = None) -> subprocess.CompletedProcess[str]:
    env = cli_env() if path is None else cli_env(PATH=path)
    return subprocess.run(
        [sys.executable, "-m", "loopx", "--root", str(root), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
        check=False,
    )


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    assert _loopx(root, "init").returncode == 0
    (tmp_path / "w").mkdir()
    added = _loopx(root, "goal", "add", "g", "--objective", "x", "--workdir", str(tmp_path / "w"),
                   "--host-kind", "demo")  # fmt: skip
    assert added.returncode == 0, added.stderr
    return root


@pytest.mark.parametrize(
    ("args", "path", "says"),
    [
        (
            [
                "goal",
                "add",
                "a",
                "--objective",
                "x",
                "--workdir",
                "{tmp}/nowhere",
                "--host",
                "sh -c true",
            ],
            None,
            "does not exist",
        ),
        (
            [
                "goal",
                "add",
                "a",
                "--objective",
                "x",
                "--workdir",
                "{tmp}/w",
                "--host",
                "no-such-program-29",
            ],
            None,
            "not found",
        ),
        (
            [
                "goal",
                "add",
                "a",
                "--objective",
                "x",
                "--workdir",
                "{tmp}/w",
                "--host-kind",
                "codex",
            ],
            "{tmp}/empty-path",
            "not found on PATH",
        ),
        (["goal", "add", "g", "--update", "--host-kind", "nosuchkind"], None, "nosuchkind"),
        (["supervisor", "run", "--agents", "1", "--visible", "tmux"], "{tmp}/empty-path", "tmux"),
        (["supervisor", "stop", "--timeout", "-5"], None, "--timeout"),
    ],
    ids=[
        "missing-workdir",
        "missing-program",
        "missing-codex",
        "unknown-kind-update",
        "tmux-missing",
        "negative-timeout",
    ],
)
def test_a_refused_setup_exits_2(
    root: Path, tmp_path: Path, args: list[str], path: str | None, says: str
) -> None:
    """Each refusal exits 2 (USAGE) with one error line naming the fault and a hint."""
    (tmp_path / "empty-path").mkdir(exist_ok=True)
    argv = [a.replace("{tmp}", str(tmp_path)) for a in args]
    proc = _loopx(root, *argv, path=path.replace("{tmp}", str(tmp_path)) if path else None)
    assert proc.returncode == exitcodes.USAGE, proc.stderr
    assert says in proc.stderr
    assert "hint: " in proc.stderr
    assert "loopx goal add ID --update --host-kind" not in proc.stderr  # the command just run


def test_demo_json_reports_the_exit_code_it_returns(tmp_path: Path) -> None:
    """`demo --json`'s exit_code is the command's own."""
    proc = _loopx(tmp_path / "demo-root", "demo", "--json")
    assert json.loads(proc.stdout)["exit_code"] == proc.returncode
    assert "its files stay in" in proc.stderr.splitlines()[-1]  # not left without a word


def test_a_host_flag_starting_with_a_dash_is_a_value(root: Path, tmp_path: Path) -> None:
    """`--host '--fail'` registers the demo host's flag, as `--host=--fail` does."""
    proc = _loopx(root, "goal", "add", "d", "--objective", "x", "--workdir", str(tmp_path / "w"),
                  "--host-kind", "demo", "--host", "--fail")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    shown = json.loads(_loopx(root, "goal", "show", "d", "--json").stdout)
    assert "--fail" in json.dumps(shown)
