"""No host outlives its agent: a SIGKILLed agent's host tree ends within seconds.

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
from pathlib import Path

import psutil
import pytest

from loopx.agents.hostguard import guard_for_run, stop_guard
from loopx.agents.hostlimits import Limits
from loopx.agents.hostrun import run_host
from loopx.registry.goalrecords import HostKind
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
    """A run that ends normally releases its guard; a bystander lives, also once the guard exits."""
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        guard = guard_for_run("0123456789abcdef", grace_s=0.1)
        pid = guard.pid
        assert pid is not None
        guard.watch(bystander.pid)
        guard.release()
        stop_guard()  # reaped: gone
        assert not psutil.pid_exists(pid)
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()


def test_one_guard_serves_every_run_of_a_process(tmp_path: Path) -> None:
    """run_host reuses this process's guard; what is left after a run is that guard alone."""
    stop_guard()
    env = {**os.environ, "LOOPX_TURN_KEY": "k", "LOOPX_ROOT": str(tmp_path)}
    guards = set()
    for _ in range(3):
        run = run_host(
            [sys.executable, "-c", "print('hi')"],
            stdin=b"",
            cwd=tmp_path,
            env=env,
            limits=Limits(timeout_s=30),
            turn_key="k",
            loopx_root=str(tmp_path),
        )
        assert run.exit_code == 0
        (child,) = psutil.Process().children()
        guards.add(child.pid)
    assert len(guards) == 1
    stop_guard()
    assert psutil.Process().children() == []


def test_a_guard_killed_between_runs_is_started_again(tmp_path: Path) -> None:
    stop_guard()
    first = guard_for_run("0123456789abcdef", grace_s=0.1)
    first.release()
    killed = first.pid
    assert killed is not None
    os.kill(killed, signal.SIGKILL)
    wait_for("the guard dead", lambda: not alive(killed), timeout=10)
    second = guard_for_run("fedcba9876543210", grace_s=0.1)
    try:
        assert second.pid not in (None, killed)
    finally:
        second.release()
        stop_guard()


def test_an_agent_killed_between_runs_leaves_its_guard_to_exit(tmp_path: Path) -> None:
    """The pipe closes with no run begun: the guard kills nothing and exits."""
    code = (
        "from loopx.agents.hostguard import guard_for_run\n"
        "g = guard_for_run('0123456789abcdef', grace_s=0.1)\n"
        "g.watch(int(__import__('sys').argv[1]))\n"
        "g.release()\n"
        "print(g.pid, flush=True)\n"
        "__import__('time').sleep(600)\n"
    )
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    agent = subprocess.Popen(
        [sys.executable, "-c", code, str(bystander.pid)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert agent.stdout is not None
        with agent.stdout:
            guard_pid = int(agent.stdout.readline())
        agent.kill()
        agent.wait()
        wait_for("the guard gone", lambda: not alive(guard_pid), timeout=10)
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()
        if agent.poll() is None:
            agent.kill()
            agent.wait()
