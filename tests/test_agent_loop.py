"""The agent loop as a real process: one step, turn budget, heartbeat, signals, parent death."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tests.fleet_helpers import (
    add_demo_goal,
    clean_env,
    cli,
    journals,
    leftovers,
    running_program,
    wait_for,
)
from tests.turnkit import demo_runs

pytestmark = pytest.mark.timeout(120)


def agent(root: Path, *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "loopx.agents",
            "run",
            "--root",
            str(root),
            "--agent-id",
            "a1",
            *args,
        ],
        env=clean_env(LOOPX_ROOT=str(root.resolve()), LOOPX_AGENT_ID="a1"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def heartbeat(root: Path) -> dict | None:
    try:
        return json.loads((root / "agents" / "a1.json").read_text())
    except (FileNotFoundError, ValueError):
        return None


def test_a_console_that_refuses_writes_loses_lines_not_turns(root: Path, tmp_path: Path) -> None:
    """stdout on a full disk (/dev/full): every host runs once and every turn commits.

    The console echoes the host's output from inside the host's run: a refused
    write there killed a finished host before its outcome was recorded, and
    recovery ran it again (the resource chaos soak caught it).
    """
    add_demo_goal(root, "g", tmp_path / "w", "--steps", "3", "--stdout-result")
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [
                *(sys.executable, "-m", "loopx.agents", "run", "--root", str(root)),
                *("--agent-id", "a1", "--max-turns", "3"),
            ],
            env=clean_env(LOOPX_ROOT=str(root.resolve()), LOOPX_AGENT_ID="a1"),
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=90,
            check=False,
        )
    assert done.returncode == 0, done.stderr
    assert [j["status"] for j in journals(root, "g")] == ["committed"] * 3
    runs = [line.split() for line in demo_runs(tmp_path / "w")]
    assert [attempt for _, attempt, _ in runs] == ["1", "1", "1"], runs
    assert len({key for key, _, _ in runs}) == 3, runs


def test_once_runs_exactly_one_turn(root: Path, tmp_path: Path) -> None:
    """`loopx agent run --once` runs one turn and exits 0, its heartbeat counting it."""
    add_demo_goal(root, "g", tmp_path / "w", "--steps", "5")
    done = cli(root, "agent", "run", "--agent-id", "a1", "--once")
    assert done.returncode == 0, done.stderr
    assert [j["status"] for j in journals(root, "g")] == ["committed"]
    beat = heartbeat(root)
    assert beat is not None
    assert (beat["turns_done"], beat["phase"]) == (1, "stopping")


def test_max_turns_bounds_the_loop(root: Path, tmp_path: Path) -> None:
    """--max-turns N: N turns, then exit 0."""
    add_demo_goal(root, "g", tmp_path / "w", "--steps", "10")
    proc = agent(root, "--max-turns", "2")
    try:
        assert proc.wait(timeout=60) == 0
    finally:
        proc.kill()
        proc.wait()
    assert len(journals(root, "g")) == 2


def test_idle_agent_exits_0_on_sigterm(root: Path) -> None:
    """An agent with nothing to do sleeps, and SIGTERM ends it with exit code 0."""
    root.mkdir(mode=0o700)
    cli(root, "init")
    proc = agent(root)
    try:
        wait_for("an idle heartbeat", lambda: (heartbeat(root) or {}).get("phase") == "idle")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    finally:
        proc.kill()
        proc.wait()


def test_sigterm_mid_turn_stops_the_host_and_exits_0(root: Path, tmp_path: Path) -> None:
    """SIGTERM while the host runs: the host is terminated, the journal ends stopped, exit 0."""
    add_demo_goal(root, "g", tmp_path / "w", "--hang", "60")
    proc = agent(root)
    try:
        wait_for(
            "the host",
            lambda: running_program(root, "loopx.agents.demo"),
        )
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        assert [j["status"] for j in journals(root, "g")] == ["stopped"]
        assert leftovers(root) == []
    finally:
        proc.kill()
        proc.wait()


def test_agent_stops_when_its_parent_is_gone(root: Path) -> None:
    """--parent-pid: when that process dies, the agent stops by itself (tmux mode's safety net)."""
    root.mkdir(mode=0o700)
    cli(root, "init")
    parent = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    started = psutil.Process(parent.pid).create_time()
    proc = agent(root, "--parent-pid", str(parent.pid), "--parent-started-at", repr(started))
    try:
        wait_for("an idle heartbeat", lambda: (heartbeat(root) or {}).get("phase") == "idle")
        parent.kill()
        parent.wait()
        assert proc.wait(timeout=20) == 0
    finally:
        parent.kill()
        parent.wait()
        proc.kill()
        proc.wait()


def test_the_heartbeat_names_the_turn_in_flight_and_its_start(root: Path, tmp_path: Path) -> None:
    """While a host runs, `agents/<id>.json` carries the goal, the turn key and the turn's start."""
    add_demo_goal(root, "g", tmp_path / "w", "--steps", "5", "--hang", "30")
    proc = agent(root, "--once")
    try:
        beat = wait_for(
            "a heartbeat naming the turn",
            lambda: (b := heartbeat(root)) is not None and b["turn_key"] is not None and b,
        )
        [journal] = journals(root, "g")
        assert (beat["goal_id"], beat["turn_key"], beat["phase"]) == (
            "g",
            journal["turn_key"],
            "running",
        )
        assert beat["turn_started_at"] == journal["created_at"]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)


@pytest.mark.parametrize(
    ("outcome", "says"),
    [
        ("completed", "; done"),
        ("needs_human", "; waits for a human"),
        ("progress", "next eligible"),
    ],
)
def test_the_outcome_line_says_what_comes_next(outcome: str, says: str) -> None:
    """After completed or needs_human the line no longer claims "next eligible now"."""
    import io

    from loopx.agents.console import AgentConsole

    out = io.StringIO()
    console = AgentConsole("agent-1", out, [])
    console.finished(goal_id="g", seq=1, outcome=outcome, wall_s=1.0, cpu_s=0.1, tokens=0,
                     cost_usd=0.0, next_eligible_at=None)  # fmt: skip
    line = json.loads(out.getvalue().splitlines()[-1])["line"]
    assert says in line
    assert (outcome == "progress") == ("next eligible" in line)
