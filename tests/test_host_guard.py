"""No host outlives its agent: a SIGKILLed agent's host tree ends within seconds (issue 28 item 7).

Each host runs beside a guard (``loopx.agents.guard``) holding a pipe from its
agent; when the pipe closes without the agent's word, the guard ends the
host's group and every process of the run, ``setsid`` grandchildren included,
whether or not a supervisor is alive.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from loopx.agents.hostguard import HostGuard
from loopx.agents.hostrun import Limits, run_host
from loopx.registry.model import HostKind
from tests.fleet_helpers import alive, kill_everything, start_supervisor, wait_for
from tests.turnkit import cli_env, demo_goal, make_root

# A host that starts a grandchild which leaves the host's session, then both wait.
ESCAPING_HOST = """
import os, sys, time
marker = os.path.join(os.environ["LOOPX_WORKDIR"], "grandchild.pid")
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        with open(marker + ".tmp", "w") as f:
            f.write(str(os.getpid()))
        os.rename(marker + ".tmp", marker)
        time.sleep(600)
    os._exit(0)
time.sleep(600)
"""


def _turn_processes(root: Path) -> list[psutil.Process]:
    """Live processes carrying this root and a turn key: hosts and what they started."""
    out = []
    for proc in psutil.process_iter():
        try:
            env = proc.environ()
        except psutil.Error:
            continue
        if env.get("LOOPX_ROOT") == str(root) and "LOOPX_TURN_KEY" in env and alive(proc):
            out.append(proc)
    return out


def _is_agent(proc: psutil.Process) -> bool:
    try:
        return "loopx.agents" in " ".join(proc.cmdline())
    except psutil.Error:  # a zombie, or gone
        return False


def _kill_all(procs: list[psutil.Process]) -> None:
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.kill()


@pytest.mark.timeout(120)
def test_a_sigkilled_agent_leaves_no_host_process(tmp_path: Path) -> None:
    """Given `turn run-once` running a host whose grandchild setsid()s, SIGKILL it: all end."""
    layout = make_root(tmp_path / "root")
    work = tmp_path / "work"
    demo_goal(layout, "g", work, sys.executable, "-c", ESCAPING_HOST, kind=HostKind.COMMAND)
    agent = subprocess.Popen(
        [sys.executable, "-m", "loopx", "--root", str(layout.root), "turn", "run-once", "g"],
        env=cli_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        wait_for("the grandchild", (work / "grandchild.pid").exists, timeout=60)
        grandchild = int((work / "grandchild.pid").read_text())
        assert _turn_processes(layout.root), "the host tree runs"
        agent.send_signal(signal.SIGKILL)
        agent.wait()
        wait_for("no host process left", lambda: not _turn_processes(layout.root), timeout=10)
        # The same deadline for the escaped grandchild (its environment may be unreadable
        # while it exits, which hides it from the scan above).
        wait_for("the grandchild gone", lambda: not alive(grandchild), timeout=10)
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()
        _kill_all(_turn_processes(layout.root))


@pytest.mark.timeout(180)
def test_sigkill_of_supervisor_and_agents_together_leaves_no_host(tmp_path: Path) -> None:
    """Given a supervisor whose agent runs an escaping host, SIGKILL both: nothing is left."""
    root = tmp_path / "root"
    layout = make_root(root)
    work = tmp_path / "work"
    demo_goal(layout, "g", work, sys.executable, "-c", ESCAPING_HOST, kind=HostKind.COMMAND)
    sup = start_supervisor(root, "--agents", "1")
    try:
        wait_for("the grandchild", (work / "grandchild.pid").exists, timeout=90)
        agents = [p for p in psutil.Process(sup.pid).children(recursive=True) if _is_agent(p)]
        assert agents
        for proc in [psutil.Process(sup.pid), *agents]:
            with contextlib.suppress(psutil.Error):
                proc.send_signal(signal.SIGKILL)
        sup.wait()
        wait_for("no host process left", lambda: not _turn_processes(root), timeout=10)
    finally:
        kill_everything(root, sup)
        _kill_all(_turn_processes(root))


def test_a_released_guard_kills_nothing(tmp_path: Path) -> None:
    """A run that ends normally releases its guard; the guard exits, a bystander lives."""
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        guard = HostGuard.start("0123456789abcdef", grace_s=0.1)
        assert guard.pid is not None
        guard.watch(bystander.pid)
        guard.release()
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()


def test_a_host_run_ends_with_its_guard_gone(tmp_path: Path) -> None:
    """run_host reaps its guard: no child of ours is left when it returns."""
    run = run_host(
        [sys.executable, "-c", "print('hi')"],
        stdin=b"",
        cwd=tmp_path,
        env={**os.environ, "LOOPX_TURN_KEY": "k", "LOOPX_ROOT": str(tmp_path)},
        limits=Limits(timeout_s=30),
        turn_key="k",
        loopx_root=str(tmp_path),
    )
    assert run.exit_code == 0
    assert psutil.Process().children() == []


def test_the_guard_starts_fast() -> None:
    """Starting and releasing a guard costs tens of milliseconds, not a Python with site."""
    t0 = time.monotonic()
    for _ in range(5):
        HostGuard.start("0123456789abcdef", grace_s=0.1).release()
    per_guard = (time.monotonic() - t0) / 5
    assert per_guard < 0.5, per_guard
