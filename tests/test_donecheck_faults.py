"""Crash around the done_check phase, recover, and land on the undisturbed run's files.

A crash before the check's result is recorded runs the check again (the host
never); a recorded result is never run again.
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

from loopx.donecheck import DoneCheckSpec
from loopx.model import utcnow
from loopx.registry.goalrecords import HostKind, HostSpec
from loopx.registry.goals import GoalChanges, add_goal
from tests.checkkit import check_runs, write_scripts
from tests.fleet_helpers import alive
from tests.turnkit import cli_env, durable_snapshot, loopx, loopx_here, make_root

KEY = "g-t000001-e1"
# The check not recorded yet: the next claim runs it.
BEFORE = ["after:host_execute", "after:validation", "before:done_check"]
# Recorded: recovery finishes the turn without running it again.
AFTER = ["after:done_check", "before:durable_writeback", "writeback:history", "after:quota_spend"]


def _goal(tmp_path: Path, check_code: str | None = None) -> tuple[Path, Path]:
    root, wd = tmp_path / "root", tmp_path / "wd"
    layout = make_root(root)
    host, check = write_scripts(wd)
    if check_code is not None:
        (wd / "check.py").write_text(check_code)
    changes = GoalChanges(
        objective="fix the tests",
        workdir=str(wd),
        host=HostSpec(kind=HostKind.COMMAND, argv=host.split()),
        done_check=DoneCheckSpec(argv=check.split(), timeout_s=60),
    )
    add_goal(layout, "g", changes, update=False, default_workdir=wd, now=utcnow())
    return root, wd


def _host_runs(wd: Path) -> int:
    path = wd / "envelopes.jsonl"
    return len(path.read_text().splitlines()) if path.exists() else 0


def _snapshot(root: Path, wd: Path) -> dict[str, object]:
    return durable_snapshot(make_root(root), "g", wd)


@pytest.fixture(scope="module")
def undisturbed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    base = tmp_path_factory.mktemp("undisturbed")
    root, wd = _goal(base)
    assert loopx(root, "turn", "run-once", "g").returncode == 0
    assert check_runs(wd) == [KEY]
    return _snapshot(root, wd)


def _crash(root: Path, point: str) -> None:
    crashed = loopx(root, "turn", "run-once", "g", LOOPX_FAULT=point)
    assert crashed.returncode == 137, crashed.stderr
    assert f"fault point {point} reached" in crashed.stderr


@pytest.mark.parametrize("point", BEFORE)
def test_a_crash_before_the_record_runs_the_check_again(tmp_path, point, undisturbed):
    """Killed before the check's result is durable: recovery leaves it, the next claim runs it."""
    root, wd = _goal(tmp_path)
    _crash(root, point)
    assert check_runs(wd) == []
    recovered = json.loads(loopx_here(root, "recover", "--json").stdout)
    assert recovered["check_pending"] == [KEY]
    assert recovered["retry_pending"] == []
    assert loopx(root, "turn", "run-once", "g").returncode == 0
    assert _snapshot(root, wd) == undisturbed
    assert (check_runs(wd), _host_runs(wd)) == ([KEY], 1)


@pytest.mark.parametrize("point", AFTER)
def test_a_recorded_check_is_never_run_again(tmp_path, point, undisturbed):
    """Killed once the result is recorded: recovery finishes the turn from the journal alone."""
    root, wd = _goal(tmp_path)
    _crash(root, point)
    assert check_runs(wd) == [KEY]
    recovered = json.loads(loopx_here(root, "recover", "--json").stdout)
    assert recovered["check_pending"] == []
    assert loopx_here(root, "recover").returncode == 0  # idempotent
    assert _snapshot(root, wd) == undisturbed
    assert (check_runs(wd), _host_runs(wd)) == ([KEY], 1)


def test_an_agent_killed_while_its_check_runs(tmp_path, undisturbed):
    """SIGKILL of the agent mid-check: the orphaned check is killed, then run again to the end."""
    slow_first = (
        "import os, sys, time\n"
        "with open('checks.log', 'a') as f: f.write(os.environ['LOOPX_TURN_KEY'] + '\\n')\n"
        "if not os.path.exists('slow-done'):\n"
        "    open('slow-done', 'w').write(str(os.getpid()))\n"
        "    time.sleep(120)\n"
        "print('FAILED test_a\\nFAILED test_b\\nFAILED test_c\\n3 failed')\n"
        "sys.exit(1)\n"
    )
    root, wd = _goal(tmp_path, slow_first)
    agent = subprocess.Popen(
        [sys.executable, "-m", "loopx", "--root", str(root), "turn", "run-once", "g"],
        env=cli_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while not (wd / "slow-done").exists() or not (wd / "slow-done").read_text():
            assert time.monotonic() < deadline, "the check never started"
            assert agent.poll() is None
            time.sleep(0.05)
        check_pid = int((wd / "slow-done").read_text())
        os.kill(agent.pid, signal.SIGKILL)
        agent.wait(timeout=30)
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()
    # The host guard ends the check's tree when its agent dies, though the check
    # runs in a session of its own.
    deadline = time.monotonic() + 10
    while alive(check_pid):
        assert time.monotonic() < deadline, "the orphaned check outlived its agent by 10 s"
        time.sleep(0.05)
    recovered = json.loads(loopx_here(root, "recover", "--json").stdout)
    assert recovered["check_pending"] == [KEY]
    assert loopx(root, "turn", "run-once", "g", LOOPX_LEASE_TTL_S="1").returncode == 0
    assert not alive(check_pid)
    assert (check_runs(wd), _host_runs(wd)) == ([KEY, KEY], 1)
    snapshot = _snapshot(root, wd)
    # The check's own output differs only in what the slow first run left behind.
    assert snapshot == undisturbed
