"""The live tail of a running host's output: bounded, redacted, gone when the host ends."""

from __future__ import annotations

import subprocess
import sys
import time

from loopx.registry.goalrecords import HostKind
from loopx.turn.livetail import TAIL_BYTES, LiveTail, live_file, read_live
from loopx.web.server import make_server
from tests.test_dashboard_server import call
from tests.test_server import running
from tests.turnkit import cli_env, demo_goal

SECRET = "sk-live-0123456789abcdef"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_tail_is_bounded_redacted_and_removed(layout):
    """A secret split across chunks is redacted; the newest 16 KiB are kept; close removes it."""
    clock = Clock()
    tail = LiveTail(layout, "g", "g-000001-1", [SECRET], clock=clock)
    tail.feed(b"line one\nkey=" + SECRET[:7].encode())
    clock.now = 0.1
    tail.feed(SECRET[7:].encode() + b"\n")  # too soon after the first write: not flushed
    assert SECRET[7:] not in read_live(layout, "g").text
    clock.now = 1.0
    tail.feed(b"done\n")
    live = read_live(layout, "g")
    assert live.text == "line one\nkey=[REDACTED]\ndone\n"
    clock.now = 2.0
    tail.feed(b"x" * 100 + b"\n" + b"y" * (3 * TAIL_BYTES))
    live = read_live(layout, "g")
    assert len(live.text) <= TAIL_BYTES
    assert set(live.text) == {"y"}  # starts after the cut line, not inside it
    assert live.total_bytes == 3 * TAIL_BYTES + 101 + len("line one\nkey=\ndone\n") + len(SECRET)
    tail.close()
    assert read_live(layout, "g") is None


HOST = (
    "import os, sys, time\n"
    "print('compiling step 1', flush=True)\n"
    "print('using key', os.environ['MY_API_TOKEN'], flush=True)\n"
    # Runs until the test has seen its output (a fixed sleep could end first on a loaded machine).
    "deadline = time.monotonic() + 120\n"
    "while not os.path.exists(os.environ['LIVETAIL_GO']) and time.monotonic() < deadline:\n"
    "    time.sleep(0.02)\n"
    "os.execv(sys.executable, [sys.executable, '-m', 'loopx.agents.demo'])\n"
)


def test_running_host_output_is_served_live(layout, tmp_path):
    """While a real turn runs, /api/goals/<id>/live shows its output, redacted; then it is gone."""
    demo_goal(layout, "g", tmp_path / "work", sys.executable, "-c", HOST, kind=HostKind.COMMAND)
    server = make_server(layout, port=0)
    go = tmp_path / "seen"
    for srv in running(server):
        proc = subprocess.Popen(
            [sys.executable, "-m", "loopx", "--root", str(layout.root), "turn", "run-once", "g"],
            env=cli_env(MY_API_TOKEN=SECRET, LIVETAIL_GO=str(go)),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            deadline = time.monotonic() + 30
            while True:
                status, doc = call(srv, "GET", "/api/goals/g/live")
                if status == 200 and "using key" in doc["text"]:
                    break
                assert time.monotonic() < deadline, "no live output while the host ran"
                time.sleep(0.1)
            assert "compiling step 1" in doc["text"]
            assert SECRET not in doc["text"]
            assert "[REDACTED]" in doc["text"]
            go.touch()
            _, err = proc.communicate(timeout=60)
            assert proc.returncode == 0, err
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.communicate()
        assert not live_file(layout, "g").exists()
        assert call(srv, "GET", "/api/goals/g/live")[0] == 204  # no host runs now
