"""Watching a host cheaply: the sampling backs off, yet the tree, its peak and its escapees are seen.

How fast it is, is measured by ``benchmarks/host_watch.py``; these tests
check what the cheaper watch still sees and enforces, with real processes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from loopx import environ
from loopx.agents.hostlimits import Limits, next_period, next_wait
from loopx.agents.hostrun import run_host
from loopx.agents.hosttree import Tree
from loopx.process import subreaper
from loopx.turn.failures import FailureReason
from tests.fleet_helpers import alive

KEY = "g-t000001-e1"
RUN = "run-1"
MB = 1024 * 1024


def _env(root: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPX_")}
    env.update({environ.TURN_KEY: KEY, environ.ROOT: str(root), environ.HOST_RUN: RUN})
    return env


def _py(code: str) -> list[str]:
    return [sys.executable, "-c", code]


@contextmanager
def _host(root: Path, code: str) -> Iterator[subprocess.Popen[bytes]]:
    """A Python host of ours in its own session, driven line by line; its group is killed after."""
    proc = subprocess.Popen(
        _py(code),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=root,
        env=_env(root),
        start_new_session=True,
    )
    try:
        yield proc
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        assert proc.stdin is not None
        assert proc.stdout is not None
        proc.stdin.close()
        proc.stdout.close()


def _say(proc: subprocess.Popen[bytes], line: bytes) -> bytes:
    """Send the host a line and return the line it answers (it answers once its work is done)."""
    assert proc.stdin is not None
    assert proc.stdout is not None
    proc.stdin.write(line + b"\n")
    proc.stdin.flush()
    return proc.stdout.readline().strip()


def _sample_until(tree: Tree, pid: int, timeout_s: float = 30.0) -> bool:
    """Sample until ``pid`` is in the tree; return whether the sample that found it saw a change."""
    deadline = time.monotonic() + timeout_s
    while True:
        seen = tree.sample()
        if pid in tree.pids:
            return seen.changed
        assert time.monotonic() < deadline, f"process {pid} never joined the tree"
        time.sleep(0.01)


# --- the schedule ---------------------------------------------------------------------------------


def test_a_quiet_tree_is_sampled_ever_less_often_up_to_once_a_second():
    """Doubling from 10 ms, a tree that does not change is sampled at most once a second."""
    periods = [0.01]
    for _ in range(10):
        periods.append(next_period(periods[-1], changed=False, near_cap=False))
    assert periods[:4] == [0.01, 0.02, 0.04, 0.08]
    assert periods[-1] == 1.0
    assert periods == sorted(periods)


def test_a_changing_tree_is_sampled_every_100_ms_again_at_once():
    """A change after a quiet spell brings the period back to 0.1 s, and keeps it there."""
    assert next_period(1.0, changed=True, near_cap=False) == 0.1
    assert next_period(0.1, changed=True, near_cap=False) == 0.1
    assert next_period(0.01, changed=True, near_cap=False) == 0.02


def test_a_tree_past_half_its_memory_cap_is_sampled_every_100_ms():
    """Near its memory cap a quiet tree is sampled as often as a changing one."""
    assert next_period(1.0, changed=False, near_cap=True) == 0.1


def test_a_stop_is_checked_every_50_ms_at_first_then_every_quarter_second():
    """Between samples the loop wakes for a possible stop: 50 ms in the first second, 0.25 s after."""
    limits = Limits(timeout_s=60)
    assert next_wait(1.0, 0.5, limits, stoppable=True) == 0.05
    assert next_wait(1.0, 5.0, limits, stoppable=True) == 0.25
    assert next_wait(1.0, 5.0, limits, stoppable=False) == 1.0


def test_the_wait_never_passes_the_timeout():
    """However quiet the tree, the loop wakes when the turn's time is up."""
    limits = Limits(timeout_s=10)
    assert next_wait(1.0, 9.8, limits, stoppable=False) == pytest.approx(0.201)
    assert next_wait(1.0, 12.0, limits, stoppable=False) == pytest.approx(0.001)


# --- what a sample sees ---------------------------------------------------------------------------

SPIKE = """
import sys
for line in sys.stdin:
    b = bytearray(200 * 1024 * 1024)
    del b
    print("freed", flush=True)
"""


def test_a_memory_spike_between_two_samples_is_in_the_peak(tmp_path):
    """200 MB allocated and freed between two samples still shows in the tree's peak RSS."""
    with _host(tmp_path, SPIKE) as host:
        tree = Tree(host.pid, KEY, str(tmp_path), RUN)
        tree.sample()
        # When: the host allocates and frees 200 MB while nobody samples.
        assert _say(host, b"go") == b"freed"
        now = tree.sample()
    # Then: the sample finds it small again, and its high-water mark in the peak.
    assert now.rss_bytes < 100 * MB
    assert tree.peak_rss >= 190 * MB


FORKER = """
import os, signal, sys
print("ready", flush=True)
for line in sys.stdin:
    pid = os.fork()
    if pid == 0:
        signal.pause()
    print(pid, flush=True)
"""


def test_a_quiet_tree_is_unchanged_and_a_new_child_is_a_change(tmp_path):
    """Two samples of an idle host see no change; the sample that finds its new child does."""
    with _host(tmp_path, FORKER) as host:
        assert host.stdout is not None
        assert host.stdout.readline() == b"ready\n"  # started: its memory no longer grows
        tree = Tree(host.pid, KEY, str(tmp_path), RUN)
        first = tree.sample()
        again = tree.sample()
        child = int(_say(host, b"fork"))
        found_changed = _sample_until(tree, child)
    assert (first.changed, again.changed, found_changed) == (True, False, True)


# The host answers with the daemon's pid once the daemon's parent has exited.
DETACH = """
import os, sys
for line in sys.stdin:
    if os.fork() == 0:
        os.setsid()
        pid = os.fork()
        if pid == 0:
            os.execve("/bin/sleep", ["sleep", "60"], {})
        open("daemon.pid", "w").write(str(pid))
        os._exit(0)
    os.wait()
    print(open("daemon.pid").read(), flush=True)
"""


def test_a_detached_descendant_with_a_scrubbed_environment_stays_in_the_tree(tmp_path):
    """A grandchild that setsid's, drops LOOPX_* and whose parent exits is still sampled."""
    with subreaper() as reaping, _host(tmp_path, DETACH) as host:
        assert reaping
        tree = Tree(host.pid, KEY, str(tmp_path), RUN)
        tree.sample()
        daemon = int(_say(host, b"detach"))
        try:
            _sample_until(tree, daemon)
        finally:
            # Reparented to us, the subreaper: ours to kill and collect.
            os.kill(daemon, signal.SIGKILL)
            os.waitpid(daemon, 0)


# --- what the watch still enforces and measures ---------------------------------------------------

TIMEOUT_DAEMON = """
import os, signal, sys, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        open("daemon.pid", "w").write(str(os.getpid()))
        os.execve("/bin/sleep", ["sleep", "60"], {})
    os._exit(0)
os.wait()
time.sleep(60)
"""


def test_timeout_kills_a_detached_grandchild_without_loopx_variables(tmp_path):
    """At the timeout, a setsid'd grandchild that ignores SIGTERM and has no LOOPX_* dies too."""
    run = run_host(
        _py(TIMEOUT_DAEMON),
        stdin=b"",
        cwd=tmp_path,
        env=_env(tmp_path),
        limits=Limits(timeout_s=1.5, kill_grace_s=0.3),
        turn_key=KEY,
        loopx_root=str(tmp_path),
    )
    assert run.killed is FailureReason.TURN_TIMEOUT
    pid_file = tmp_path / "daemon.pid"
    deadline = time.monotonic() + 30
    while not pid_file.exists() or alive(int(pid_file.read_text() or 0)):
        assert time.monotonic() < deadline, "the detached grandchild outlived its turn"
        time.sleep(0.02)


BURNING_DAEMON = """
import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        end = time.process_time() + 0.5
        while time.process_time() < end:
            pass
        open("burnt", "w").close()
        time.sleep(60)
    os._exit(0)
os.wait()
while not os.path.exists("burnt"):
    time.sleep(0.01)
"""


def test_the_cpu_of_a_detached_daemon_counts_towards_the_turn(tmp_path):
    """A daemon that burnt 0.5 s of CPU, which nobody in the tree waits for, is in the turn's usage."""
    run = run_host(
        _py(BURNING_DAEMON),
        stdin=b"",
        cwd=tmp_path,
        env=_env(tmp_path),
        limits=Limits(timeout_s=60, kill_grace_s=0.3),
        turn_key=KEY,
        loopx_root=str(tmp_path),
    )
    assert run.exit_code == 0, run.stderr.text()
    assert run.usage.cpu_s >= 0.4, run.usage
