"""sd_notify over a real unix datagram socket: the messages the supervisor sends, and when."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from loopx.supervisor.notify import Notifier, socket_address, watchdog_interval_s


def receiver(path: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.settimeout(10)
    return sock


def test_messages_reach_a_path_socket(tmp_path: Path) -> None:
    """READY, STATUS, WATCHDOG, STOPPING and EXTEND_TIMEOUT_USEC arrive as KEY=VALUE datagrams."""
    path = tmp_path / "notify.sock"
    with receiver(path) as sock:
        n = Notifier({"NOTIFY_SOCKET": str(path)})
        assert n.ready("2 agents")
        assert n.status("busy")
        assert n.watchdog()
        assert n.stopping()
        assert n.extend_timeout(2.5)
        got = [sock.recv(4096).decode() for _ in range(5)]
        n.close()
    assert got[0].splitlines()[:2] == ["READY=1", "STATUS=2 agents"]
    assert got[1:4] == ["STATUS=busy", "WATCHDOG=1", "STOPPING=1\nSTATUS=stopping"]
    assert got[4] == "EXTEND_TIMEOUT_USEC=2500000"


def test_abstract_socket_name() -> None:
    """An @name address is the Linux abstract namespace."""
    name = f"loopx-test-{os.getpid()}-{time.monotonic_ns()}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        sock.bind(b"\0" + name.encode())
        sock.settimeout(10)
        n = Notifier({"NOTIFY_SOCKET": "@" + name})
        assert n.watchdog()
        n.close()
        assert sock.recv(100) == b"WATCHDOG=1"
    finally:
        sock.close()
    assert socket_address("@x") == b"\0x"


def test_without_socket_is_a_noop() -> None:
    """No NOTIFY_SOCKET: nothing is sent and nothing fails."""
    n = Notifier({})
    assert not n.enabled
    assert not n.ready("x")
    n.close()


def test_watchdog_interval_is_half_and_respects_pid() -> None:
    """WATCHDOG=1 is due at half WATCHDOG_USEC, only for the named pid."""
    assert watchdog_interval_s({"WATCHDOG_USEC": "4000000"}, pid=5) == 2.0
    assert watchdog_interval_s({"WATCHDOG_USEC": "4000000", "WATCHDOG_PID": "6"}, pid=5) is None
    assert watchdog_interval_s({}, pid=5) is None


@pytest.mark.timeout(60)
def test_supervisor_speaks_the_protocol(tmp_path: Path) -> None:
    """A real supervisor sends READY=1, then WATCHDOG=1 pings, then STOPPING=1 on SIGTERM, and exits 0."""
    root = tmp_path / "root"
    path = tmp_path / "n.sock"
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPX_")}
    env |= {"NOTIFY_SOCKET": str(path), "WATCHDOG_USEC": "400000"}
    # Every command but init, demo and batch run needs an initialised root.
    subprocess.run(
        [sys.executable, "-m", "loopx", "--root", str(root), "init"],
        env=env,
        check=True,
        capture_output=True,
    )
    with receiver(path) as sock:
        proc = subprocess.Popen(
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
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            messages: list[str] = []
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and sum(m == "WATCHDOG=1" for m in messages) < 2:
                messages.append(sock.recv(4096).decode())
            assert any(m.startswith("READY=1") for m in messages)
            ready_at = next(i for i, m in enumerate(messages) if m.startswith("READY=1"))
            assert "WATCHDOG=1" in messages[ready_at:]
            proc.send_signal(signal.SIGTERM)
            while not any(m.startswith("STOPPING=1") for m in messages):
                messages.append(sock.recv(4096).decode())
            assert proc.wait(timeout=30) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
