"""`batch run` refuses a bad plan or a busy root before it registers or creates anything.

Also: `--fail-fast` and a plan's `max_failures` end a hopeless goal at once, and Ctrl-C exits 130.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from loopx import exitcodes
from tests.turnkit import cli_env


def _plan(tmp_path: Path, goals: list[dict[str, object]]) -> Path:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({"schema_version": 1, "goals": goals}))
    return path


def _loopx(root: Path, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "loopx", "--root", str(root), *args],
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=timeout,
        check=False,
    )


def _entries(path: Path) -> set[str]:
    return {str(p.relative_to(path)) for p in path.rglob("*")}


def test_a_missing_workdir_exits_2_having_created_nothing(tmp_path: Path) -> None:
    """A plan naming a missing workdir exits 2 naming the goal; no folder, no root is made."""
    plan = _plan(
        tmp_path,
        [
            {"id": "ok", "objective": "x", "host_kind": "demo"},
            {"id": "typo", "objective": "x", "host_kind": "demo", "workdir": "no/such/dir"},
        ],
    )
    before = _entries(tmp_path)
    proc = _loopx(tmp_path / "root", "batch", "run", str(plan))
    assert proc.returncode == exitcodes.USAGE, proc.stderr
    assert "goals[1] (id 'typo').workdir" in proc.stderr
    assert _entries(tmp_path) == before


def test_a_missing_host_program_names_the_goal(tmp_path: Path) -> None:
    """A command host whose program is not on PATH is refused with its goal and field."""
    plan = _plan(tmp_path, [{"id": "p", "objective": "x", "host": "no-such-program-29 --x"}])
    proc = _loopx(tmp_path / "root", "batch", "run", str(plan))
    assert proc.returncode == exitcodes.USAGE, proc.stderr
    assert "goals[0] (id 'p').host" in proc.stderr
    assert not (tmp_path / "root").exists()


def test_a_host_kind_typo_exits_2_having_created_nothing(tmp_path: Path) -> None:
    """A host kind no adapter runs is refused at once, naming the goal and the kinds known."""
    plan = _plan(
        tmp_path,
        [
            {"id": "ok", "objective": "x", "host_kind": "demo"},
            {"id": "typo", "objective": "x", "host_kind": "codx"},
        ],
    )
    before = _entries(tmp_path)
    proc = _loopx(tmp_path / "root", "batch", "run", str(plan), timeout=30)
    assert proc.returncode == exitcodes.USAGE, proc.stderr
    first, hint = proc.stderr.splitlines()
    assert "goals[1] (id 'typo').host_kind: no host adapter for host kind 'codx'" in first
    assert "codex" in first
    assert hint == "hint: fix the plan and run again; nothing was registered"
    assert _entries(tmp_path) == before


def test_a_missing_done_check_program_names_the_goal(tmp_path: Path) -> None:
    """A done-check whose program is not found is refused before anything runs."""
    plan = _plan(
        tmp_path,
        [{"id": "c", "objective": "x", "host_kind": "demo", "done_check": "no-such-check-x"}],
    )
    proc = _loopx(tmp_path / "root", "batch", "run", str(plan), timeout=30)
    assert proc.returncode == exitcodes.USAGE, proc.stderr
    assert "goals[0] (id 'c').done_check" in proc.stderr
    assert not (tmp_path / "root").exists()


def test_a_running_supervisor_is_refused_before_registering(tmp_path: Path) -> None:
    """With a supervisor holding the root, `batch run` fails and registers no goal of the plan."""
    root = tmp_path / "root"
    assert _loopx(root, "init").returncode == 0
    sup = subprocess.Popen(
        [sys.executable, "-m", "loopx", "--root", str(root), "supervisor", "run", "--agents", "1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=cli_env(),
    )
    try:
        deadline = time.monotonic() + 60
        while not (root / "supervisor.json").exists():
            assert time.monotonic() < deadline, "the supervisor did not start"
            time.sleep(0.05)
        plan = _plan(tmp_path, [{"id": "late", "objective": "x", "host_kind": "demo"}])
        proc = _loopx(root, "batch", "run", str(plan))
        assert proc.returncode == exitcodes.FAILURE, proc.stderr
        assert "already running" in proc.stderr
        assert not (root / "goals" / "late").exists()
    finally:
        sup.send_signal(signal.SIGTERM)
        sup.wait(timeout=90)


def _failing(goal_id: str, **extra: object) -> dict[str, object]:
    return {"id": goal_id, "objective": "fail", "host_kind": "demo", "host": ["--fail"]} | {
        "max_host_attempts": 1,
        **extra,
    }


@pytest.mark.parametrize(
    ("goal", "flags"),
    [(_failing("f"), ["--fail-fast"]), (_failing("f", max_failures=2), [])],
    ids=["fail-fast", "max-failures-2"],
)
def test_a_hopeless_goal_ends_at_once_as_failed(
    tmp_path: Path, goal: dict[str, object], flags: list[str]
) -> None:
    """An always-failing goal ends `failed` after its limit, not after the backoff rounds."""
    plan = _plan(tmp_path, [goal])
    report = tmp_path / "rep"
    started = time.monotonic()
    proc = _loopx(tmp_path / "root", "batch", "run", str(plan), "--report", str(report), *flags)
    wall = time.monotonic() - started
    assert proc.returncode == exitcodes.FAILURE, proc.stderr
    row = json.loads((report / "report.json").read_text())["goals"][0]
    assert row["outcome"] == "failed"
    assert row["turns"] == (goal.get("max_failures") or 1)
    # One 30 s backoff for max_failures=2; the default idle horizon alone would be 60 s more.
    assert wall < (30 if "--fail-fast" in flags else 60) + 25, wall


@pytest.mark.parametrize("moment", [0.0, 0.5, 2.0])
def test_ctrl_c_on_batch_run_exits_130(tmp_path: Path, moment: float) -> None:
    """SIGINT while the fleet runs (at ``moment`` after its first turn): report written, exit 130."""
    plan = _plan(
        tmp_path, [{"id": "slow", "objective": "x", "host_kind": "demo", "host": ["--hang", "60"]}]
    )
    root, report = tmp_path / "root", tmp_path / "rep"
    argv = [sys.executable, "-m", "loopx", "--root", str(root), "batch", "run", str(plan)]
    proc = subprocess.Popen(
        [*argv, "--report", str(report)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=cli_env(),
    )
    turns = root / "goals" / "slow" / "turns"
    try:
        deadline = time.monotonic() + 60
        while not (turns.exists() and any(turns.glob("*.json"))):
            assert time.monotonic() < deadline, "no turn started"
            time.sleep(0.05)
        time.sleep(moment)  # the moment of the signal, not a synchronisation
        os.kill(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == exitcodes.INTERRUPTED, err
        assert (report / "report.json").exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
