"""A warm answer before argparse: the call a command line made, remembered by its exact words.

The first run of a `status --json` or `quota should-run` line goes through
argparse and remembers the call it made to try a memo (``loopx.memo.remember``);
the next run of the same words makes that call before parsing anything.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from loopx.api._warm import command_key
from loopx.cli import main
from loopx.memo import recall
from tests.turnkit import cli_env


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A root with one goal; this process's host cache under ``tmp_path``."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    root = tmp_path / "root"
    assert main(["--root", str(root), "init"]) == 0
    assert main(["--root", str(root), "goal", "add", "g", "--objective", "x"]) == 0
    return root


@pytest.mark.parametrize(
    ("argv", "call"),
    [
        (["quota", "should-run", "g"], ("quota", {"goal_id": "g", "as_json": False})),
        (["quota", "should-run", "g", "--json"], ("quota", {"goal_id": "g", "as_json": True})),
        (["status", "--json"], ("status", {"ttl_s": 5.0})),
        (["status", "--json", "--ttl", "300"], ("status", {"ttl_s": 300.0})),
        (["status", "--json", "--clear-cache"], None),  # not a memo's answer
        (["status", "--json", "--limit", "1"], None),
        (["status"], None),
        (["quota", "show", "g"], None),
        (["--log-level", "loud", "quota", "should-run", "g"], None),  # argparse refuses it
        (["quota", "should-run", "g", "-h"], None),
    ],
)
def test_only_a_line_that_tried_a_memo_is_remembered_with_argparses_arguments(
    root: Path, argv: list[str], call: tuple[str, dict[str, object]] | None
) -> None:
    line = ["--root", str(root), *argv]
    with contextlib.suppress(SystemExit):  # -h
        main(line)
    kept = recall(command_key(line))
    if call is None:
        assert kept is None
    else:
        name, arguments = call
        assert kept == {
            "call": name,
            "arguments": {"path": str(root), "registry": None, **arguments},
        }
    assert recall(command_key([*line, "--json"])) is None  # other words: another line


def _loopx(root: Path, tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = cli_env(XDG_CACHE_HOME=str(tmp_path / "cache"))
    return subprocess.run(
        [sys.executable, "-m", "loopx", "--root", str(root), *argv],
        capture_output=True, text=True, env=env, check=False, timeout=60,
    )  # fmt: skip


def test_a_remembered_call_checks_the_root_as_argparses_path_does(
    root: Path, tmp_path: Path
) -> None:
    """A root that others may now write into is refused, warm or not."""
    first = _loopx(root, tmp_path, "status", "--json")
    assert first.returncode == 0, first.stderr
    assert _loopx(root, tmp_path, "status", "--json").stdout == first.stdout  # warm
    os.chmod(root, 0o777)  # the point: a shared root
    refused = _loopx(root, tmp_path, "status", "--json")
    assert refused.returncode != 0
    assert "writable by other users" in refused.stderr
    assert refused.stdout == ""


def test_a_damaged_remembered_call_is_a_miss_and_is_kept_again(root: Path, tmp_path: Path) -> None:
    line = ["--root", str(root), "quota", "should-run", "g", "--json"]
    first = _loopx(root, tmp_path, *line[2:])
    assert first.returncode == 0, first.stderr
    kept = recall(command_key(line))
    assert kept is not None
    calls = tmp_path / "cache" / "loopx" / "calls"
    (path,) = calls.iterdir()
    for damage in (b"{", b"[]", json.dumps({"call": "rm", "arguments": {}}).encode()):
        path.write_bytes(damage)
        again = _loopx(root, tmp_path, *line[2:])
        assert (again.returncode, json.loads(again.stdout)["allowed"]) == (0, True), again.stderr
        assert recall(command_key(line)) == kept
