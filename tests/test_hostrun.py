"""Host execution: bounded capture, whole-tree measurement, enforcement, nothing left behind."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from loopx import environ
from loopx.agents.hostlimits import Limits
from loopx.agents.hostrun import run_host
from loopx.errors import LeaseLostError
from loopx.process import find_by_env
from loopx.turn.failures import FailureReason
from tests.fleet_helpers import alive

KEY = "g-t000001-e1"


def _env(root: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPX_")}
    env.update({"LOOPX_TURN_KEY": KEY, "LOOPX_ROOT": str(root), "LOOPX_GOAL_ID": "g"})
    return env


def _run(tmp_path: Path, argv: list[str], **kw):
    limits = kw.pop("limits", Limits(timeout_s=30, kill_grace_s=0.5))
    return run_host(
        argv,
        stdin=b"{}",
        cwd=tmp_path,
        env=_env(tmp_path),
        limits=limits,
        turn_key=KEY,
        loopx_root=str(tmp_path),
        **kw,
    )


def _py(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_env_cwd_and_stdin_reach_the_host(tmp_path):
    """The host runs in the workdir with the LOOPX_* variables and the envelope on stdin."""
    code = "import os,sys;print(os.getcwd(), os.environ['LOOPX_TURN_KEY'], sys.stdin.read())"
    run = _run(tmp_path, _py(code))
    assert run.exit_code == 0
    assert run.stdout.text().split() == [str(tmp_path), KEY, "{}"]


def test_output_is_bounded_and_the_rest_counted(tmp_path):
    """5 MiB on stdout keeps the first 1 MiB and counts the rest."""
    code = "import sys;sys.stdout.buffer.write(b'x'*(5*1024*1024))"
    run = _run(tmp_path, _py(code))
    assert len(run.stdout.kept) == 1024 * 1024
    assert run.stdout.dropped == 4 * 1024 * 1024


def test_cpu_of_four_forked_workers_is_measured(tmp_path):
    """Four workers burning 0.5 s CPU each are measured within 20% of 2 s."""
    code = (
        "import os,time\n"
        "def burn():\n"
        "    end=time.process_time()+0.5\n"
        "    while time.process_time()<end: pass\n"
        "pids=[]\n"
        "for _ in range(4):\n"
        "    pid=os.fork()\n"
        "    if pid==0:\n"
        "        burn(); os._exit(0)\n"
        "    pids.append(pid)\n"
        "for p in pids: os.waitpid(p,0)\n"
    )
    run = _run(tmp_path, _py(code))
    assert run.exit_code == 0
    assert 1.6 <= run.usage.cpu_s <= 2.4, run.usage


def test_peak_rss_of_a_child_allocating_300_mb(tmp_path):
    """A child holding 300 MB shows a peak RSS of at least 250 MB."""
    code = (
        "import os,time\n"
        "pid=os.fork()\n"
        "if pid==0:\n"
        "    b=bytearray(300*1024*1024)\n"
        "    for i in range(0,len(b),4096): b[i]=1\n"
        "    time.sleep(0.5); os._exit(0)\n"
        "os.waitpid(pid,0)\n"
    )
    run = _run(tmp_path, _py(code))
    assert run.usage.peak_rss_mb >= 250, run.usage


def test_memory_cap_kills_the_tree(tmp_path):
    """Past max_rss_mb the tree is killed with quota_memory_exceeded; usage is still measured."""
    code = (
        "import os,time\n"
        "b=bytearray(300*1024*1024)\n"
        "for i in range(0,len(b),4096): b[i]=1\n"
        "time.sleep(30)\n"
    )
    run = _run(tmp_path, _py(code), limits=Limits(timeout_s=30, max_rss_mb=100, kill_grace_s=0.5))
    assert run.killed is FailureReason.QUOTA_MEMORY_EXCEEDED
    assert run.usage.cpu_s > 0
    assert run.usage.peak_rss_mb > 100


def test_timeout_kills_a_setsid_grandchild_that_ignores_sigterm(tmp_path):
    """On timeout the group, the host and a setsid'd SIGTERM-ignoring grandchild all die."""
    argv = [
        sys.executable,
        "-m",
        "loopx.agents.demo",
        "--grandchild",
        "60",
        "--hang",
        "60",
        "--ignore-term",
    ]
    started = time.monotonic()
    run = _run(tmp_path, argv, limits=Limits(timeout_s=1.0, kill_grace_s=0.3))
    assert run.killed is FailureReason.TURN_TIMEOUT
    assert time.monotonic() - started < 60  # the host's --hang: it was killed, not waited for
    pid = int((tmp_path / ".loopx-demo" / "grandchild.pid").read_text())
    deadline = time.monotonic() + 30
    while alive(pid):
        assert time.monotonic() < deadline, "grandchild survived"
        time.sleep(0.02)
    assert find_by_env(str(tmp_path), {environ.TURN_KEY: KEY}) == []


def test_stop_event_terminates_the_host(tmp_path):
    """Setting the stop event ends the run as stopped, well before the timeout."""
    stop = threading.Event()
    timer = threading.Timer(0.3, stop.set)
    timer.start()
    try:
        run = _run(tmp_path, _py("import time;time.sleep(60)"), stop=stop)
    finally:
        timer.cancel()
    assert run.killed is FailureReason.STOPPED
    assert run.signal is not None


def test_failed_renewal_kills_the_host_and_propagates(tmp_path):
    """A tick raising LeaseLostError kills the tree and re-raises."""

    def tick() -> None:
        raise LeaseLostError("g", 1, 2)

    with pytest.raises(LeaseLostError):
        _run(tmp_path, _py("import time;time.sleep(60)"), tick=tick, tick_every_s=0.05)
    assert find_by_env(str(tmp_path), {environ.TURN_KEY: KEY}) == []


def test_lost_lease_spares_the_new_holders_retry_of_the_same_turn(tmp_path):
    """A host killed for a lost lease takes only its own run: another run of its turn key lives."""
    # Given: the new holder's retry of the turn (same root and turn key, its own run id).
    retry = psutil.Popen(
        _py("import time;time.sleep(60)"), env=_env(tmp_path) | {environ.HOST_RUN: "retry"}
    )
    try:

        def tick() -> None:
            raise LeaseLostError("g", 1, 2)

        # When: the old holder's renewal fails and it kills its host tree.
        with pytest.raises(LeaseLostError):
            _run(tmp_path, _py("import time;time.sleep(60)"), tick=tick, tick_every_s=0.05)
        # Then: the retry still runs; nothing else of the turn is left.
        assert retry.is_running()
        assert retry.status() != psutil.STATUS_ZOMBIE
        assert [p.pid for p in find_by_env(str(tmp_path), {environ.TURN_KEY: KEY})] == [retry.pid]
    finally:
        retry.kill()
        retry.wait()


def test_missing_program_is_a_spawn_error(tmp_path):
    """A program that does not exist gives spawn_error, not an exception."""
    run = _run(tmp_path, [str(tmp_path / "nope")])
    assert run.spawn_error is not None
    assert "nope" in run.spawn_error


def test_descendants_left_after_exit_are_killed(tmp_path):
    """A background child still running when the host exits does not outlive the turn."""
    code = (
        "import subprocess,sys,time\n"
        "p=subprocess.Popen([sys.executable,'-c','import time;time.sleep(60)'])\n"
        "open('child.pid','w').write(str(p.pid))\n"
        "time.sleep(0.3)\n"
    )
    run = _run(tmp_path, _py(code))
    assert run.exit_code == 0
    pid = int((tmp_path / "child.pid").read_text())
    deadline = time.monotonic() + 30
    while alive(pid):
        assert time.monotonic() < deadline, "child survived its host"
        time.sleep(0.02)


def test_peak_rss_of_a_sleeping_sh_is_the_hosts_not_the_agents(tmp_path):
    """A `sh` that only sleeps is recorded under 10 MB (not the forked agent's ~45 MB)."""
    run = _run(tmp_path, ["sh", "-c", "sleep 0.5"])
    assert run.exit_code == 0
    assert 0 < run.usage.peak_rss_mb < 10, run.usage


def test_a_100_mb_host_is_stopped_past_a_30_mb_cap(tmp_path):
    """A host holding 100 MB under max_rss_mb=30 is killed as over its cap; its peak is above it."""
    code = "b=bytearray(100*1024*1024)\nfor i in range(0,len(b),4096): b[i]=1\nimport time;time.sleep(30)\n"
    run = _run(tmp_path, _py(code), limits=Limits(timeout_s=30, max_rss_mb=30, kill_grace_s=0.5))
    assert run.killed is FailureReason.QUOTA_MEMORY_EXCEEDED
    assert run.usage.peak_rss_mb > 30
