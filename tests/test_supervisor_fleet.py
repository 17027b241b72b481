"""The supervisor with real processes and signals (agents idle: the roots have no eligible goal)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tests.fleet_helpers import (
    alive,
    clean_env,
    cli,
    kill_everything,
    leftovers,
    record,
    running_record,
    sigterm_and_wait,
    start_supervisor,
    supervisor,
    wait_for,
)

pytestmark = pytest.mark.timeout(120)


def test_second_supervisor_is_refused_naming_the_holder(root: Path) -> None:
    """A second supervisor on the same root exits 1 and names the first one's pid."""
    with supervisor(root) as (first, _):
        second = cli(root, "supervisor", "run", "--agents", "1")
        assert second.returncode == 1
        assert f"pid {first.pid}" in second.stderr


def test_sigterm_stops_the_fleet_leaving_nothing(root: Path) -> None:
    """SIGTERM: exit 0 within the grace, every agent gone, record says stopped."""
    with supervisor(root, "--stop-grace-seconds", "10", agents=2) as (proc, rec):
        agents = [psutil.Process(s["pid"]) for s in rec["slots"]]
        assert sigterm_and_wait(proc, timeout=15) == 0  # the grace, plus a busy machine
        assert not [a for a in agents if alive(a)]
        assert leftovers(root) == []
        final = record(root)
        assert final is not None
        assert (final["state"], final["exit_code"]) == ("stopped", 0)


def test_killed_agent_is_restarted(root: Path) -> None:
    """An agent SIGKILLed is reported precisely and replaced by a new process."""
    with supervisor(root) as (_proc, rec):
        old = rec["slots"][0]["pid"]
        os.kill(old, signal.SIGKILL)

        def restarted() -> dict | None:
            r = record(root)
            slot = r["slots"][0] if r else None
            return (
                slot if slot and slot["pid"] not in (None, old) and slot["restarts"] == 1 else None
            )

        slot = wait_for("a restarted agent", restarted)
        assert slot["last_exit"] == {
            "kind": "signalled",
            "code": None,
            "signal": "SIGKILL",
            "detail": "",
        }
        assert psutil.pid_exists(slot["pid"])


def test_crash_loop_is_detected_and_shown(root: Path) -> None:
    """Agents dying at start are restarted with backoff until a crash loop is recorded and shown."""
    args = (
        "--crash-loop-restarts",
        "3",
        "--crash-loop-window-seconds",
        "60",
        "--restart-max-seconds",
        "30",
    )
    proc = start_supervisor(root, "--agents", "1", *args, LOOPX_FAULT="agent:start")
    try:

        def in_loop() -> bool:
            r = record(root)
            return bool(r and r["slots"] and r["slots"][0]["crash_loop"])

        wait_for("a crash loop", in_loop)
        slot = record(root)["slots"][0]  # type: ignore[index]
        assert (slot["last_exit"]["kind"], slot["last_exit"]["code"]) == ("exited", 137)
        assert slot["recent_restarts"] >= 3
        status = json.loads(cli(root, "supervisor", "status", "--json").stdout)
        assert (status["running"], status["crash_loop"]) == (True, True)
        assert "CRASH LOOP" in cli(root, "supervisor", "status").stdout
    finally:
        kill_everything(root, proc)


def test_new_supervisor_reaps_a_sigkilled_supervisors_fleet(root: Path) -> None:
    """After SIGKILL of the supervisor, the next one kills every old agent and host before spawning."""
    root.mkdir(mode=0o700)
    # A host that escaped its agent (own session) and ignores SIGTERM, as an old fleet might leave.
    stray = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import signal,time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)",
        ],
        env=clean_env(LOOPX_ROOT=str(root.resolve()), LOOPX_AGENT_ID="agent-1", LOOPX_TURN_KEY="t"),
        start_new_session=True,
    )
    first = start_supervisor(root, "--agents", "2")
    second = None
    try:
        rec = wait_for("the first fleet", lambda: running_record(root, first.pid, 2))
        old_agents = [psutil.Process(s["pid"]) for s in rec["slots"]]
        first.kill()
        first.wait()
        second = start_supervisor(root, "--agents", "1")
        wait_for("the second fleet", lambda: running_record(root, second.pid, 1))
        stray.wait(timeout=10)  # reaped: SIGKILL after the grace
        assert not [a for a in old_agents if alive(a)]
        assert sigterm_and_wait(second) == 0
        assert leftovers(root) == []
    finally:
        stray.kill()
        stray.wait()
        kill_everything(root, first, *([second] if second else []))


def test_sighup_scales_up_and_down(root: Path) -> None:
    """`supervisor scale N` + SIGHUP changes the number of live agents both ways."""
    with supervisor(root) as (proc, _):
        assert cli(root, "supervisor", "scale", "3").returncode == 0
        rec = wait_for("3 agents", lambda: running_record(root, proc.pid, 3))
        assert [s["agent_id"] for s in rec["slots"]] == ["agent-1", "agent-2", "agent-3"]
        removed = [psutil.Process(s["pid"]) for s in rec["slots"][1:]]
        assert cli(root, "daemon", "scale", "1").returncode == 0
        wait_for("1 agent", lambda: running_record(root, proc.pid, 1))
        wait_for(
            "retired agents to exit",
            lambda: not any(alive(p) for p in removed),
        )


def test_stalled_heartbeat_is_killed_and_restarted(root: Path) -> None:
    """An agent frozen with SIGSTOP stops beating; the supervisor kills its tree and restarts it."""
    with supervisor(root, "--stall-seconds", "3", "--heartbeat-seconds", "0.5") as (_proc, rec):
        old = rec["slots"][0]["pid"]
        os.kill(old, signal.SIGSTOP)

        def replaced() -> dict | None:
            r = record(root)
            slot = r["slots"][0] if r else None
            return slot if slot and slot["pid"] not in (None, old) else None

        slot = wait_for("the stalled agent replaced", replaced)
        assert slot["last_exit"]["kind"] == "stalled"
        assert slot["last_exit"]["detail"].startswith("heartbeat silent for")
        assert not alive(old)


def test_until_idle_with_nothing_to_do_exits_0(root: Path) -> None:
    """--until-idle on a root without goals exits 0 and leaves nothing running."""
    proc = start_supervisor(root, "--agents", "2", "--until-idle")
    try:
        assert proc.wait(timeout=60) == 0
        assert leftovers(root) == []
    finally:
        kill_everything(root, proc)


def test_start_status_stop_detached(root: Path) -> None:
    """`supervisor start` runs it in the background; status shows it; `daemon stop` ends it all."""
    try:
        assert cli(root, "init").returncode == 0
        started = cli(root, "supervisor", "start", "--agents", "1", "--json")
        assert started.returncode == 0, started.stderr
        pid = json.loads(started.stdout)["supervisor"]["pid"]
        status = json.loads(cli(root, "daemon", "status", "--json").stdout)
        assert (status["running"], status["supervisor"]["pid"]) == (True, pid)
        assert (root / "logs" / "supervisor.log").exists()
        stopped = cli(root, "daemon", "stop", "--json")
        assert stopped.returncode == 0, stopped.stderr
        assert json.loads(stopped.stdout)["supervisor"]["state"] == "stopped"
        assert not alive(pid)
        assert leftovers(root) == []
    finally:
        rec = record(root)
        if rec and psutil.pid_exists(rec["pid"]):
            os.kill(rec["pid"], signal.SIGKILL)
        kill_everything(root)


def test_tmux_visible_mode(root: Path) -> None:
    """--visible tmux: one private tmux session with a window per agent; stop removes it all."""
    with supervisor(root, "--visible", "tmux", agents=2) as (proc, rec):
        sock = root / "tmux.sock"
        windows = subprocess.run(
            [
                "tmux",
                "-S",
                str(sock),
                "list-windows",
                "-t",
                rec["tmux_session"],
                "-F",
                "#{window_name}",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        assert {"agent-1", "agent-2"} <= set(windows)
        assert (
            subprocess.run(
                ["tmux", "-S", str(sock), "has-session", "-t", rec["tmux_session"]], check=False
            ).returncode
            == 0
        )
        assert sigterm_and_wait(proc) == 0
        assert not sock.exists()
        assert leftovers(root) == []
