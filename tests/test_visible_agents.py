"""Agents you can watch: tmux windows show each turn as it happens, and a crash's last words stay.

Driven through tmux itself (`capture-pane`), against a real supervisor.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from loopx.agents.console import MAX_LINES_PER_TURN, AgentConsole
from loopx.registry.goalrecords import Goal, HostKind, HostSpec
from loopx.supervisor.tmux import session_name
from tests.fleet_helpers import clean_env, cli, kill_everything, sigterm_and_wait, wait_for

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")

SECRET = "tok-7f3a9c1e5d"  # the value of a secret-named variable: never shown
HOST = """#!/bin/sh
echo "hello from the host, token $MY_API_TOKEN"
echo "a warning on stderr" >&2
echo '{"kind": "progress", "summary": "said hello"}' > "$LOOPX_RESULT_FILE"
"""


def _root(tmp_path: Path) -> tuple[Path, Path]:
    root, work = tmp_path / "root", tmp_path / "work"
    work.mkdir()
    host = work / "host.sh"
    host.write_text(HOST)
    host.chmod(0o755)
    assert cli(root, "init").returncode == 0
    added = cli(root, "goal", "add", "g1", "--objective", "greet", "--host", "./host.sh",
                "--workdir", str(work))  # fmt: skip
    assert added.returncode == 0, added.stderr
    return root, work


def _pane(root: Path, window: str) -> str:
    proc = subprocess.run(
        [
            "tmux",
            "-S",
            str(root / "tmux.sock"),
            "capture-pane",
            "-p",
            "-J",
            "-S",
            "-200",
            "-t",
            f"{session_name(root.resolve())}:{window}",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    return proc.stdout


def _start(root: Path, log: Path, *args: str, **env: str) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
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
                "--visible",
                "tmux",
                *args,
            ],
            env=clean_env(MY_API_TOKEN=SECRET, **env),
            stdout=subprocess.PIPE,
            stderr=out,
        )


def test_an_agent_window_shows_claim_output_and_outcome(tmp_path: Path) -> None:
    """The agent's window: the claim, the host's live lines (redacted), the outcome line."""
    root, _ = _root(tmp_path)
    # The starting terminal's size is not the panes': the fleet table fills the pane's 200 columns.
    proc = _start(root, tmp_path / "sup.log", "--json", COLUMNS="80", LINES="24")
    try:
        pane = wait_for(
            "the turn's outcome line in the agent window",
            lambda: (p := _pane(root, "agent-1")) and "g1 turn 1: progress" in p and p,
            timeout=60,
        )
        assert "claimed g1: turn 1 (command host) - greet" in pane
        assert "| hello from the host, token [REDACTED]" in pane
        assert "! a warning on stderr" in pane
        assert "said hello" in pane
        assert SECRET not in pane
        fleet = wait_for(
            "the status table in the fleet window",
            lambda: (p := _pane(root, "fleet")) and "agents alive" in p and p,
        )
        assert "g1" in fleet
        # The headless log keeps the same lines (tmux pipes the window into it).
        log = wait_for(
            "the window's lines in logs/agent-1.log",
            lambda: (
                "hello from the host" in (t := (root / "logs" / "agent-1.log").read_text()) and t
            ),
        )
        assert SECRET not in log
        assert sigterm_and_wait(proc) == 0
        assert proc.stdout is not None
        summary = json.loads(proc.stdout.read())
        assert (summary["exit_code"], summary["turns"] >= 1) == (0, True)
        assert summary["supervisor"]["state"] == "stopped"
    finally:
        kill_everything(root, proc)
        if proc.stdout is not None:
            proc.stdout.close()


def test_a_crashed_agent_keeps_its_last_words_and_exit_status(tmp_path: Path) -> None:
    """An agent that dies mid-turn: the supervisor logs its exit code and last output lines."""
    root, _ = _root(tmp_path)
    log = tmp_path / "sup.log"
    # The agent dies (exit 137) after its host ran, before the turn is written back.
    proc = _start(root, log, LOOPX_FAULT="before:durable_writeback")
    try:
        event = wait_for(
            "the supervisor to report the agent's death",
            lambda: next(
                (
                    e
                    for line in log.read_text().splitlines()
                    if line.startswith("{")
                    and (e := json.loads(line)).get("event") == "agent_exited"
                ),
                None,
            ),
            timeout=60,
        )
        assert event["how"] == "exit code 137", event
        assert any("hello from the host" in line for line in event["last_output"]), event
        assert not any(SECRET in line for line in event["last_output"])
        status = cli(root, "supervisor", "status")
        assert "exit code 137" in status.stdout, status.stdout
    finally:
        kill_everything(root, proc)
        if proc.stdout is not None:
            proc.stdout.close()


def _goal() -> Goal:
    from loopx.model import utcnow

    now = utcnow()
    return Goal(
        id="g", objective="o", workdir="/w", host=HostSpec(kind=HostKind.DEMO, argv=[]),
        created_at=now, updated_at=now,
    )  # fmt: skip


def test_console_bounds_a_chatty_host(tmp_path: Path) -> None:
    """Past MAX_LINES_PER_TURN lines the console says how many more there were, and where."""
    out = (tmp_path / "console.txt").open("w")
    console = AgentConsole("a1", out, [SECRET])
    console.started(_goal(), seq=4)
    console.output("stdout", b"".join(b"line %d\n" % i for i in range(MAX_LINES_PER_TURN + 5)))
    console.output("stdout", b"no newline at the end " + SECRET.encode())
    console.finished(goal_id="g", seq=4, outcome="progress", wall_s=1.0, cpu_s=0.5,
                     tokens=1200, cost_usd=0.01, next_eligible_at=None)  # fmt: skip
    out.close()
    text = (tmp_path / "console.txt").read_text()
    assert f"line {MAX_LINES_PER_TURN - 1}" in text
    assert f"line {MAX_LINES_PER_TURN}\n" not in text
    assert "6 more lines of host output in goals/g/runs/4.md" in text
    assert "g turn 4: progress in 1.0s, CPU 0.50s, 1,200 tokens, $0.0100" in text


def test_the_fleet_window_lives_when_the_cwd_holds_a_loopx_folder(tmp_path: Path) -> None:
    """A `loopx/` folder in the supervisor's cwd does not shadow ours in the fleet window (-P)."""
    root, _ = _root(tmp_path)
    here = tmp_path / "here"
    (here / "loopx").mkdir(parents=True)
    (here / "loopx" / "__init__.py").write_text("raise SystemExit('the wrong loopx')\n")
    with (tmp_path / "sup.log").open("ab") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-P",
                "-m",
                "loopx",
                "--root",
                str(root),
                "supervisor",
                "run",
                "--agents",
                "1",
                "--visible",
                "tmux",
            ],
            env=clean_env(),
            cwd=here,
            stdout=subprocess.DEVNULL,
            stderr=out,
        )
    try:
        wait_for(
            "the status table in the fleet window",
            lambda: "agents alive" in _pane(root, "fleet"),
            timeout=60,
        )
        assert sigterm_and_wait(proc) == 0
    finally:
        kill_everything(root, proc)
