"""`loopx logs` and the log files under the root: JSON lines only, rotated, followed."""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from loopx import exitcodes
from loopx.agents.console import AgentConsole
from loopx.history.logreader import LogQuery, read
from loopx.log.rotation import RotatingFile, rotated
from loopx.model import utcnow
from loopx.supervisor.windowlog import pump
from loopx.testing.status_fixtures import make_goal
from tests.fleet_helpers import clean_env, cli, kill_everything, sigterm_and_wait, wait_for
from tests.turnkit import make_root

HOST = """#!/bin/sh
printf '\\033[31mred\\033[0m line\\r\\n'
echo "plain text on stderr" >&2
echo '{"kind": "progress", "summary": "said hello"}' > "$LOOPX_RESULT_FILE"
"""


def _root(tmp_path: Path) -> Path:
    root, work = tmp_path / "root", tmp_path / "work"
    work.mkdir()
    host = work / "host.sh"
    host.write_text(HOST)
    host.chmod(0o755)
    assert cli(root, "init").returncode == 0
    added = cli(root, "goal", "add", "g1", "--objective", "greet", "--host", "./host.sh",
                "--workdir", str(work))  # fmt: skip
    assert added.returncode == 0, added.stderr
    return root


def _every_log_line_is_json(root: Path) -> int:
    """Parse every line of every log file under the root; return how many."""
    count = 0
    jq = shutil.which("jq")
    for path in (root / "logs").iterdir():
        data = path.read_bytes()
        assert b"\r" not in data, path
        assert b"\x1b" not in data, path
        for line in data.decode().splitlines():
            assert isinstance(json.loads(line), dict), (path, line)
            count += 1
        if jq is not None:  # the operations doc's filter, as a user runs it
            proc = subprocess.run(
                [jq, "-c", "select(.event != null)", str(path)],
                capture_output=True,
                check=False,
                timeout=30,
            )
            assert proc.returncode == 0, (path, proc.stderr)
    return count


def _supervise(root: Path, *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "loopx",
            "--root",
            str(root),
            "supervisor",
            "run",
            "--agents",
            "1",
            *args,
        ],
        env=clean_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _committed(root: Path) -> bool:
    history = root / "goals" / "g1" / "history.jsonl"
    return history.exists() and b'"committed"' in history.read_bytes()


def test_headless_logs_are_json_lines_with_goal_and_turn(tmp_path: Path) -> None:
    """After a headless run every log line parses, and the goal's lines carry goal_id, turn_key."""
    root = _root(tmp_path)
    log = root / "logs" / "supervisor.log"
    started = cli(root, "supervisor", "start", "--agents", "1")
    assert started.returncode == 0, started.stderr
    try:
        wait_for("a committed turn", lambda: _committed(root), timeout=90)
        assert cli(root, "supervisor", "stop").returncode == 0
    finally:
        cli(root, "supervisor", "stop", "--force")
    assert log.exists()
    assert _every_log_line_is_json(root) > 0
    shown = cli(root, "logs", "g1", "--json")
    assert shown.returncode == 0, shown.stderr
    entries = [json.loads(line) for line in shown.stdout.splitlines()]
    assert entries
    assert {e["goal_id"] for e in entries} == {"g1"}
    assert any(e["event"] == "turn" for e in entries)
    assert any(e["turn_key"] and e["source"].startswith("logs/agent-") for e in entries)


@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")
def test_tmux_window_logs_are_json_lines(tmp_path: Path) -> None:
    """After a --visible tmux run the agents' logs hold JSON lines: no ANSI codes, no CR LF."""
    root = _root(tmp_path)
    proc = _supervise(root, "--visible", "tmux")
    try:
        wait_for("a committed turn", lambda: _committed(root), timeout=90)
        wait_for(
            "the window's lines in the log",
            lambda: b"red line" in (root / "logs" / "agent-1.log").read_bytes(),
        )
        assert sigterm_and_wait(proc, timeout=90) == 0
    finally:
        kill_everything(root, proc)
    assert _every_log_line_is_json(root) > 0
    # The window's lines of the turn carry its goal: `loopx logs g1` shows them as headless.
    shown = cli(root, "logs", "g1", "--json")
    assert shown.returncode == 0, shown.stderr
    lines = [
        e["fields"]["line"]
        for e in map(json.loads, shown.stdout.splitlines())
        if e["event"] == "window_line"
    ]
    assert any("claimed g1: turn" in x for x in lines)
    assert any("red line" in x for x in lines)


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_window_s_turn_lines_carry_their_goal(tmp_path: Path) -> None:
    """What the agent console shows for a turn, piped through windowlog, is the goal's to read."""
    layout = make_root(tmp_path / "root")
    screen = _Terminal()
    console = AgentConsole("agent-1", screen, secrets=[])
    screen.write("agent-1 waiting for work\n")
    console.started(make_goal("g1", now=utcnow(), workdir=tmp_path), seq=3)
    console.output("stdout", b"\x1b[31mhello\x1b[0m from the host\r\n")
    console.finished(goal_id="g1", seq=3, outcome="progress", wall_s=1.0, cpu_s=0.1, tokens=0,
                     cost_usd=0.0, next_eligible_at=None)  # fmt: skip
    screen.write("agent-1 idle\n")
    layout.logs_dir.mkdir(exist_ok=True)
    out = RotatingFile(layout.logs_dir / "agent-1.log")
    try:
        pump(io.BytesIO(screen.getvalue().encode()), out, "agent-1")
    finally:
        out.close()
    mine = [(e.fields["line"], e.fields["seq"]) for e in read(layout, LogQuery(goal_id="g1"))]
    assert [seq for _, seq in mine] == [3, 3, 3]
    assert "claimed g1: turn 3" in mine[0][0]
    assert mine[1][0] == "  | hello from the host"
    assert "g1 turn 3: progress" in mine[2][0]
    every = read(layout, LogQuery())
    assert [e.goal_id for e in every] == [None, "g1", "g1", "g1", None]


def test_logs_of_an_unknown_goal_is_a_usage_error(tmp_path: Path) -> None:
    """A goal the root does not know: exit 2 and one line (with its hint), read or followed."""
    root = _root(tmp_path)
    for args in (("logs", "nope"), ("logs", "nope", "-f")):
        proc = cli(root, *args)
        assert proc.returncode == exitcodes.USAGE, proc.stderr
        assert proc.stderr.splitlines()[0] == f"loopx: error: no goal 'nope' in {root}"
        assert proc.stdout == ""


def test_a_log_rotates_by_size_and_logs_reads_across(tmp_path: Path) -> None:
    """A log past its size shifts to .1 .. .N, the oldest beyond N goes; read sees them in order."""
    layout = make_root(tmp_path / "root")
    layout.logs_dir.mkdir(exist_ok=True)
    path = layout.logs_dir / "agent-1.log"
    out = RotatingFile(path, max_bytes=200, keep=3)
    for i in range(40):
        line = {"event": "tick", "n": i, "goal_id": "g", "timestamp": f"2026-01-01T00:00:{i:02d}Z"}
        out.write(json.dumps(line).encode() + b"\n")
    out.close()
    files = rotated(path, 3)
    assert [p.name for p in files] == ["agent-1.log.3", "agent-1.log.2", "agent-1.log.1", path.name]
    assert all(p.stat().st_size <= 200 + 100 for p in files)
    seen = [e.fields["n"] for e in read(layout, LogQuery(goal_id="g"))]
    assert seen == sorted(seen)
    assert seen[-1] == 39
    assert 0 not in seen  # the oldest file went


def test_a_process_rotates_its_own_stderr_log(tmp_path: Path) -> None:
    """An agent-like process logging to LOOPX_LOG_FILE keeps it under the size, in kept files."""
    log = tmp_path / "x.log"
    code = (
        "from loopx.log import configure_logging, get_logger\n"
        "configure_logging(level='info')\n"
        "log = get_logger('t')\n"
        "for i in range(400): log.info('tick', n=i, pad='x' * 50)\n"
    )
    with log.open("ab") as out:
        subprocess.run(
            [sys.executable, "-c", code],
            stdout=out,
            stderr=out,
            env=clean_env(LOOPX_LOG_FILE=str(log), LOOPX_LOG_MAX_BYTES="4000"),
            check=True,
            timeout=60,
        )
    files = rotated(log)
    assert len(files) == 6  # the live file and the 5 kept
    assert all(p.stat().st_size < 4000 + 500 for p in files)
    ticks = [json.loads(line)["n"] for p in files for line in p.read_text().splitlines()]
    assert ticks == sorted(ticks)
    assert ticks[-1] == 399


def test_logs_follow_a_running_goal_and_ctrl_c_exits_130(tmp_path: Path) -> None:
    """`loopx logs g1 -f` prints the goal's turn as it commits; SIGINT ends it with 130."""
    root = _root(tmp_path)
    follower = subprocess.Popen(
        [sys.executable, "-m", "loopx", "--root", str(root), "logs", "g1", "-f", "--json"],
        env=clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    proc = _supervise(root)
    try:
        assert follower.stdout is not None
        deadline = time.monotonic() + 90
        events = []
        while not any(e["event"] == "turn" for e in events):
            assert time.monotonic() < deadline, events
            line = follower.stdout.readline()
            if line:
                events.append(json.loads(line))
        assert all(e["goal_id"] == "g1" for e in events)
        os.kill(follower.pid, signal.SIGINT)
        follower.wait(timeout=10)
        assert follower.returncode == exitcodes.INTERRUPTED
    finally:
        if follower.poll() is None:
            follower.kill()
        follower.communicate()
        sigterm_and_wait(proc, timeout=90)
        kill_everything(root, proc)
