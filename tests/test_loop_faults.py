"""No loop of the supervisor, the agents or the server dies on a resource error.

Each loop meets the error for real where a test can make it (a process's
RLIMIT_NOFILE lowered under its open descriptors with ``prlimit``, then
raised back: EMFILE), else through a fault point
(``LOOPX_FAULT=loop:<point>:MemoryError@...``: an allocation refused, which
no test can make without starving the machine). Each test asserts that the
loop said so (a log line, ``degraded`` in ``loopx status``, ``/healthz``)
and then recovered by itself.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil
import pytest

from loopx.fleet import AgentHeartbeat
from loopx.root import Layout
from loopx.storage.files import read_model_or_none
from tests.fleet_helpers import kill_everything, start_supervisor, wait_for
from tests.turnkit import cli_env, demo_goal, loopx, make_root


def _history(layout: Layout, goal_id: str) -> int:
    path = layout.history_file(goal_id)
    return len(path.read_text().splitlines()) if path.exists() else 0


def _log_has(path: Path, *needles: str) -> bool:
    text = path.read_text(errors="replace") if path.exists() else ""
    return any(all(n in line for n in needles) for line in text.splitlines())


@contextmanager
def _no_new_descriptors(pid: int) -> Iterator[None]:
    """The process can open no descriptor while inside: its soft RLIMIT_NOFILE is 3.

    A new descriptor takes the lowest free number, so a limit at what the process
    holds would pass again as soon as it closed one; 0-2 (stdio) are always taken.
    """
    proc = psutil.Process(pid)
    soft, hard = proc.rlimit(psutil.RLIMIT_NOFILE)
    proc.rlimit(psutil.RLIMIT_NOFILE, (3, hard))
    try:
        yield
    finally:
        if proc.is_running():
            proc.rlimit(psutil.RLIMIT_NOFILE, (soft, hard))


def _status_degraded(layout: Layout) -> str | None:
    done = loopx(layout.root, "status", "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["fleet"]["degraded"]


# --- the supervisor ------------------------------------------------------------------------------


@pytest.mark.timeout(180)
def test_supervisor_duties_weather_memory_errors(tmp_path: Path) -> None:
    """MemoryError in the slots and refresh duties: degraded in the log and status, then recovered."""
    layout = make_root(tmp_path / "root")
    demo_goal(layout, "g", tmp_path / "work", "--steps", "3")
    log = tmp_path / "supervisor.log"
    sup = start_supervisor(
        layout.root,
        "--agents", "1", "--refresh-interval-seconds", "0.5",
        log=log,
        LOOPX_FAULT="loop:supervisor:slots:MemoryError@3-12,loop:supervisor:refresh:MemoryError@3-6",
    )  # fmt: skip
    try:
        wait_for(
            "the slots duty degraded",
            lambda: _log_has(log, "supervisor_duty_degraded", "slots", "out of memory"),
            timeout=60,
        )
        seen = _status_degraded(layout)
        assert seen is not None
        assert "supervisor: " in seen
        assert "out of memory" in seen
        wait_for(
            "both duties recovered",
            lambda: (
                _log_has(log, "supervisor_duty_recovered", "slots")
                and _log_has(log, "supervisor_duty_recovered", "refresh")
            ),
            timeout=60,
        )
        wait_for("the goal done", lambda: _history(layout, "g") >= 3, timeout=90)
        wait_for("status clear", lambda: _status_degraded(layout) is None, timeout=30)
        assert sup.poll() is None  # the supervisor never died
        assert _log_has(log, "supervisor_duty_degraded", "refresh", "out of memory")
    finally:
        kill_everything(layout.root, sup)
    assert "Traceback" not in log.read_text()


def _agent_pid(layout: Layout) -> int | None:
    beat = read_model_or_none(layout.agent_file("agent-1"), AgentHeartbeat)
    return beat.pid if beat is not None else None


@pytest.mark.timeout(180)
def test_supervisor_weathers_descriptor_exhaustion(tmp_path: Path) -> None:
    """Given no descriptor left to the supervisor, a dead agent is respawned once they return."""
    layout = make_root(tmp_path / "root")
    demo_goal(layout, "g", tmp_path / "work", "--steps", "1000", "--kind", "wait",
              "--wait-seconds", "3600")  # fmt: skip
    log = tmp_path / "supervisor.log"
    sup = start_supervisor(layout.root, "--agents", "1", log=log)
    try:
        wait_for("an agent", lambda: _agent_pid(layout) is not None, timeout=60)
        first = _agent_pid(layout)
        assert first is not None
        with _no_new_descriptors(sup.pid):
            os.kill(first, signal.SIGKILL)
            wait_for(
                "the supervisor degraded",
                lambda: _log_has(log, "supervisor_duty_degraded", "too many open files"),
                timeout=60,
            )
            assert sup.poll() is None
        wait_for(
            "recovered",
            lambda: _log_has(log, "supervisor_duty_recovered", "too many open files"),
            timeout=60,
        )
        wait_for(
            "a new agent",
            lambda: (
                _agent_pid(layout) not in (None, first)
                and psutil.pid_exists(_agent_pid(layout) or 0)
            ),
            timeout=60,
        )
        assert sup.poll() is None
    finally:
        kill_everything(layout.root, sup)
    assert "Traceback" not in log.read_text()


# --- an agent ------------------------------------------------------------------------------------


def _agent(layout: Layout, log: Path, *args: str, **env: str) -> subprocess.Popen[bytes]:
    out = log.open("ab")
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "loopx.agents", "run", "--root", str(layout.root),
             "--agent-id", "a", "--idle-max-seconds", "0.5", "--heartbeat-seconds", "0.3",
             "--log-level", "info", *args],
            env=cli_env(**env),
            stdout=out,
            stderr=out,
        )  # fmt: skip
    finally:
        out.close()


@pytest.mark.timeout(120)
def test_agent_step_and_heartbeat_weather_memory_errors(tmp_path: Path) -> None:
    """MemoryError in the agent's step and in its heartbeat thread: both recover, turns commit."""
    layout = make_root(tmp_path / "root")
    # Each turn's host takes a second: the heartbeat thread passes a few times meanwhile.
    demo_goal(layout, "g", tmp_path / "work", "--steps", "50", "--hang", "1")
    log = tmp_path / "agent.log"
    agent = _agent(
        layout, log, "--max-turns", "2",
        LOOPX_FAULT="loop:agent:step:MemoryError@1-3,loop:agent:beat:MemoryError@1-2",
    )  # fmt: skip
    try:
        code = agent.wait(timeout=100)
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()
    assert code == 0, log.read_text()[-2000:]
    assert _history(layout, "g") == 2
    for duty in ("step", "beat"):
        assert _log_has(log, "agent_duty_degraded", duty, "out of memory"), duty
        assert _log_has(log, "agent_duty_recovered", duty), duty
    assert "Traceback" not in log.read_text()


@pytest.mark.timeout(240)
def test_agent_weathers_descriptor_exhaustion(tmp_path: Path) -> None:
    """Given no descriptor left to an agent, it degrades (log, status) and goes on once they return."""
    layout = make_root(tmp_path / "root")
    demo_goal(layout, "g", tmp_path / "work", "--steps", "1000")
    log = tmp_path / "agent.log"
    # A short lease: a turn the fault cut short may leave its lease behind, taken back at expiry.
    agent = _agent(layout, log, LOOPX_LEASE_TTL_S="6", LOOPX_LEASE_GRACE_S="2")
    try:
        wait_for("a first turn", lambda: _history(layout, "g") >= 1, timeout=60)
        with _no_new_descriptors(agent.pid):
            wait_for(
                "the agent degraded",
                lambda: _log_has(log, "degraded", "too many open files"),
                timeout=60,
            )
            stalled = _history(layout, "g")
            assert agent.poll() is None
        wait_for("recovered", lambda: _log_has(log, "recovered", "too many open files"), timeout=60)
        # A lease left behind is taken back when it expires (its 6 s plus 2 s of grace).
        wait_for("turns again", lambda: _history(layout, "g") >= stalled + 2, timeout=120)
        assert agent.poll() is None
    finally:
        agent.send_signal(signal.SIGTERM)
        try:
            agent.wait(timeout=30)
        except subprocess.TimeoutExpired:
            agent.kill()
            agent.wait()
    assert "Traceback" not in log.read_text()


def test_a_failing_agent_duty_is_published_in_status(tmp_path: Path) -> None:
    """A live agent's heartbeat naming a failing duty makes `loopx status` degraded."""
    layout = make_root(tmp_path / "root")
    beat = AgentHeartbeat(
        agent_id="a",
        pid=os.getpid(),
        pid_started_at=psutil.Process().create_time(),
        hostname=os.uname().nodename,
        phase="idle",
        started_at="2026-01-01T00:00:00Z",
        beat_at="2026-01-01T00:00:00Z",
        degraded="step: out of memory",
    )
    layout.agents_dir.mkdir(exist_ok=True)
    layout.agent_file("a").write_text(beat.model_dump_json())
    assert _status_degraded(layout) == "a: step: out of memory"


# --- the server ----------------------------------------------------------------------------------

TOKEN = "loop-faults-token-0123456789"


def _health(conn: http.client.HTTPConnection) -> tuple[int, dict[str, object]]:
    conn.request("GET", "/healthz", headers={"Authorization": f"Bearer {TOKEN}"})
    resp = conn.getresponse()
    return resp.status, json.loads(resp.read())


@pytest.mark.timeout(120)
def test_serve_refresh_weathers_memory_errors(tmp_path: Path) -> None:
    """MemoryError in the refresh thread: /healthz 503 naming it, then 200 once refreshes pass."""
    layout = make_root(tmp_path / "root")
    proc = subprocess.Popen(
        [sys.executable, "-m", "loopx", "--root", str(layout.root), "serve", "--port", "0",
         "--refresh-interval-seconds", "0.3"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=cli_env(LOOPX_SERVE_TOKEN=TOKEN, LOOPX_FAULT="loop:serve:refresh:MemoryError@3-12"),
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().decode()
        port = int(line.split()[4].split(":")[2].split("/")[0])
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        seen: list[int] = []
        deadline = time.monotonic() + 60
        while not (503 in seen and seen[-1] == 200):
            assert time.monotonic() < deadline, seen
            status, doc = _health(conn)
            if status == 503:
                assert "MemoryError" in str(doc["refresh_error"]), doc
            seen.append(status)
            time.sleep(0.1)  # polling /healthz with a deadline
        conn.close()
        assert proc.poll() is None
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    assert "Traceback" not in err.decode()
