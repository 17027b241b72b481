"""Daemonising hosts: whatever a host leaves behind, however fast it detaches, dies with its turn.

The agent is a child subreaper while a host runs, so a daemon that double
forks, calls ``setsid``, ignores SIGTERM, points fds 0-2 at /dev/null, scrubs
its environment and whose parent exits at once is still found and killed
(half of such daemons used to survive).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from loopx.agents.hostlimits import Limits
from loopx.agents.hostrun import run_host
from loopx.agents.hostsweep import own_children

KEY = "g-t000001-e1"

# fork -> setsid (a new session) -> fork; the daemon ignores SIGTERM, has no
# stdio and no LOOPX_* variables; the host exits at once.
SHELL_DAEMON = (
    "( trap '' TERM; exec setsid env -i sh -c "
    "'echo $$ > daemon.$1.pid; exec sleep 61.5' sh \"$0\" </dev/null >/dev/null 2>&1 & ) ; exit 0"
)
PY_DAEMON = """
import os, signal, sys
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        open("daemon.py.pid", "w").write(str(os.getpid()))
        os.execve("/bin/sleep", ["sleep", "61.5"], {})
    os._exit(0)
os._exit(0)
"""


def _env(root: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPX_")}
    env.update({"LOOPX_TURN_KEY": KEY, "LOOPX_ROOT": str(root), "LOOPX_GOAL_ID": "g"})
    return env


def _run(root: Path, argv: list[str]) -> None:
    run = run_host(
        argv,
        stdin=b"",
        cwd=root,
        env=_env(root),
        limits=Limits(timeout_s=30, kill_grace_s=0.0),
        turn_key=KEY,
        loopx_root=str(root),
    )
    assert run.exit_code == 0, run.stderr.text()


def _sleepers() -> list[psutil.Process]:
    """Every daemon these tests start (they sleep 61.5 s: a marker nothing else uses)."""
    return [p for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] == ["sleep", "61.5"]]


def _assert_gone(pid_file: Path) -> None:
    if not pid_file.exists():
        return  # killed before it got as far as writing its pid
    pid = int(pid_file.read_text() or 0)
    try:
        cmdline = psutil.Process(pid).cmdline() if pid else []
    except psutil.NoSuchProcess:  # gone, or dead and not reaped yet (a zombie has no cmdline)
        return
    assert cmdline != ["sleep", "61.5"], f"daemon {pid} outlived its turn"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the subreaper is Linux's")
def test_a_hundred_double_forking_daemons_leave_no_survivor(tmp_path: Path) -> None:
    """100 turns of a host that daemonises and exits at once leave no process behind."""
    # The first turn of this process starts its host guard, a child that stays: count after it.
    _run(tmp_path, ["sh", "-c", SHELL_DAEMON, "0"])
    _assert_gone(tmp_path / "daemon.0.pid")
    children = own_children()
    for i in range(1, 100):
        _run(tmp_path, ["sh", "-c", SHELL_DAEMON, str(i)])
        _assert_gone(tmp_path / f"daemon.{i}.pid")
    assert _sleepers() == []
    # Every leftover was reaped, not left as our zombie.
    assert own_children() <= children


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the subreaper is Linux's")
def test_a_python_daemon_with_a_scrubbed_environment_is_killed(tmp_path: Path) -> None:
    """fork -> setsid -> fork, SIGTERM ignored, /dev/null stdio, empty env: still killed."""
    for _ in range(5):
        _run(tmp_path, [sys.executable, "-c", PY_DAEMON])
        _assert_gone(tmp_path / "daemon.py.pid")
    deadline = time.monotonic() + 30  # a loaded machine may take a while to schedule the kills
    while _sleepers():
        assert time.monotonic() < deadline, "a daemon survived"
        time.sleep(0.02)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the subreaper is Linux's")
def test_a_process_of_another_root_under_the_same_turn_key_is_spared(tmp_path: Path) -> None:
    """Two roots in one process may run turns of the same key at once: a sweep spares the other's."""
    (tmp_path / "a").mkdir()
    started: list[subprocess.Popen[bytes]] = []
    # Started while the host runs, so it is not among the children the run found before.
    timer = threading.Timer(
        0.2, lambda: started.append(subprocess.Popen(["sleep", "30"], env=_env(tmp_path / "b")))
    )
    timer.start()
    try:
        _run(tmp_path / "a", ["sleep", "1"])
        timer.join()
        assert len(started) == 1 and started[0].poll() is None  # not this run's: left alone
    finally:
        for proc in started:
            proc.kill()
            proc.wait()


def test_doctor_reports_a_live_process_of_a_finished_turn(tmp_path: Path) -> None:
    """A process carrying this root's turn variables with no turn in progress is a finding."""
    from loopx.doctor import FindingCode, diagnose
    from tests.turnkit import make_root

    layout = make_root(tmp_path / "root")
    env = _env(layout.root)
    proc = subprocess.Popen(["sleep", "61.5"], env=env)
    try:
        report = diagnose(layout)
        found = [f for f in report.findings if f.code is FindingCode.LEFTOVER_PROCESS]
        assert [f.path for f in found] == [f"pid {proc.pid}"]
        assert not report.healthy
    finally:
        proc.kill()
        proc.wait()
