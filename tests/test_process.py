"""loopx.process with real processes: identity, zombies, recycled pids, setsid'd descendants."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from loopx import environ
from loopx.errors import EnvironmentValueError
from loopx.process import (
    ProcessIdentity,
    child_running,
    find_by_env,
    kill_tree,
    running,
    wait_gone,
)

pytestmark = pytest.mark.timeout(60)

# Spawns a grandchild in its own session that ignores SIGTERM, then prints its pid.
PARENT = """
import subprocess, sys, time
subprocess.Popen(
    [sys.executable, "-c",
     "import os, signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
     "print(os.getpid(), flush=True); time.sleep(60)"],
    start_new_session=True,
)
time.sleep(60)
"""


def until(condition: Callable[[], bool], timeout: float = 10.0) -> bool:
    """Poll ``condition`` until it holds or ``timeout`` passes; its last value."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


@pytest.fixture
def waiting_child() -> Iterator[subprocess.Popen[bytes]]:
    """A child that runs until its stdin closes."""
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE
    )
    with child:  # closes the pipe and reaps the child
        try:
            yield child
        finally:
            if child.poll() is None:
                child.kill()


def test_a_running_process_is_alive(waiting_child: subprocess.Popen[bytes]) -> None:
    """The identity read from a live pid names a live process; so does this process's own."""
    identity = ProcessIdentity.of(waiting_child.pid)
    assert identity is not None
    assert (identity.alive(), ProcessIdentity.current().alive()) == (True, True)


def test_a_zombie_is_not_alive(waiting_child: subprocess.Popen[bytes]) -> None:
    """An exited but unreaped child is dead to its identity, and child_running sees the exit."""
    identity = ProcessIdentity.of(waiting_child.pid)
    assert identity is not None
    assert waiting_child.stdin is not None
    waiting_child.stdin.close()
    assert until(lambda: not child_running(waiting_child.pid))
    # Not reaped yet: the pid still exists, as a zombie.
    assert psutil.Process(waiting_child.pid).status() == psutil.STATUS_ZOMBIE
    assert (identity.alive(), running(psutil.Process(waiting_child.pid))) == (False, False)
    # child_running never reaped it: the exit status is still ours to collect.
    assert waiting_child.wait(timeout=5) == 0


def test_a_recycled_pid_is_not_the_recorded_process(
    waiting_child: subprocess.Popen[bytes],
) -> None:
    """A pid now held by a process that started at another time is not the recorded process."""
    started = psutil.Process(waiting_child.pid).create_time()
    recorded = ProcessIdentity(waiting_child.pid, started - 3600.0)
    assert (recorded.alive(), recorded.find()) == (False, None)


def test_a_gone_pid_has_no_identity(waiting_child: subprocess.Popen[bytes]) -> None:
    """Once reaped, the pid names nothing."""
    identity = ProcessIdentity.of(waiting_child.pid)
    waiting_child.kill()
    waiting_child.wait()
    assert identity is not None
    assert (ProcessIdentity.of(waiting_child.pid), identity.alive()) == (None, False)


def test_a_gone_pid_is_answered_without_importing_psutil(
    waiting_child: subprocess.Popen[bytes],
) -> None:
    """A reaped pid is not alive, told by kill(pid, 0) alone: a cold status need not load psutil."""
    started = psutil.Process(waiting_child.pid).create_time()
    waiting_child.kill()
    waiting_child.wait()
    code = (
        "import sys; from loopx.process import ProcessIdentity; "
        f"print(ProcessIdentity({waiting_child.pid}, {started!r}).alive(), 'psutil' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_kill_tree_ends_a_setsid_grandchild_found_by_its_environment(tmp_path: Path) -> None:
    """A grandchild that left the group and ignores SIGTERM is found by env and SIGKILLed."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(environ.PREFIX)}
    env |= {environ.ROOT: str(tmp_path), environ.TURN_KEY: "k1"}
    child = subprocess.Popen(
        [sys.executable, "-c", PARENT], env=env, stdout=subprocess.PIPE, start_new_session=True
    )
    try:
        assert child.stdout is not None
        grandchild_pid = int(child.stdout.readline())
        grandchild = psutil.Process(grandchild_pid)
        assert grandchild.pid != child.pid
        assert os.getpgid(grandchild_pid) != child.pid  # escaped the child's group
        found = find_by_env(str(tmp_path), {environ.TURN_KEY: "k1"})
        assert {p.pid for p in found} == {child.pid, grandchild_pid}
        # Another turn's key, or another root, finds nothing.
        assert find_by_env(str(tmp_path), {environ.TURN_KEY: "k2"}) == []
        assert find_by_env(str(tmp_path / "other"), {environ.TURN_KEY: None}) == []

        survivors = kill_tree(found, grace_s=0.2, pgid=child.pid, child_pid=child.pid)

        assert survivors == []
        assert not running(grandchild)
        # Our child was signalled but left for us to reap: it died of SIGTERM.
        assert child.wait(timeout=5) == -signal.SIGTERM
        assert until(lambda: find_by_env(str(tmp_path), {environ.TURN_KEY: None}) == [])
    finally:
        for proc in find_by_env(str(tmp_path), {}):
            proc.kill()
        if child.poll() is None:
            child.kill()
        child.wait()
        child.stdout.close()  # type: ignore[union-attr]


def test_wait_gone_returns_the_living_at_the_deadline(
    waiting_child: subprocess.Popen[bytes],
) -> None:
    """A process that does not end is returned once the timeout passes."""
    proc = psutil.Process(waiting_child.pid)
    assert wait_gone([proc], timeout_s=0.05) == [proc]


def test_seconds_reads_a_number_and_names_a_bad_value() -> None:
    """A duration variable is a float, its default when unset, and a named error when bad."""
    assert environ.seconds(environ.LEASE_TTL_S, 30.0, {environ.LEASE_TTL_S: "2.5"}) == 2.5
    assert environ.seconds(environ.LEASE_TTL_S, 30.0, {environ.LEASE_TTL_S: ""}) == 30.0
    with pytest.raises(EnvironmentValueError, match="LOOPX_LEASE_TTL_S"):
        environ.seconds(environ.LEASE_TTL_S, 30.0, {environ.LEASE_TTL_S: "soon"})
