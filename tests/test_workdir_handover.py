"""No overlap after a death: a dead turn's processes are gone before the next turn in its workdir.

Goal a's host ignores SIGTERM and forks a ``setsid`` grandchild that ignores
it too; both append timestamps to a file in the shared workdir. The process
running a's turn is SIGKILLed alone (the host tree is left running), then
goal b on the same workdir runs a turn: b's host starts only after every
process of a's turn has exited, and sees none of them.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from loopx.model import utcnow
from loopx.registry.goalrecords import HostKind, HostSpec
from loopx.registry.goals import GoalChanges, add_goal
from tests.fleet_helpers import journals, kill_everything, wait_for
from tests.turnkit import cli_env, make_root

pytestmark = pytest.mark.timeout(60)

# argv: role ("a" or "b"). a: ignores SIGTERM, starts a setsid grandchild, both write
# "<time>" lines to a.log forever. b: records its start time and the processes of this
# root's goal a it can see, then reports progress.
HOST = r"""
import json, os, signal, subprocess, sys, time
import psutil
role = sys.argv[1]
if role == "b":
    started = time.time()
    seen = []
    for p in psutil.process_iter():
        try:
            env = p.environ()
        except (psutil.Error, OSError):
            continue
        if env.get("LOOPX_ROOT") == os.environ["LOOPX_ROOT"] and env.get("LOOPX_GOAL_ID") == "a":
            seen.append([p.pid, env.get("LOOPX_TURN_KEY")])
    json.dump({"started": started, "seen": seen}, open("b-start.json", "w"))
    json.dump({"kind": "progress", "summary": "b"}, open(os.environ["LOOPX_RESULT_FILE"], "w"))
    sys.exit(0)
WRITER = (
    "import os, signal, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "while True:\n"
    "    with open('a.log', 'a') as f:\n"
    "        f.write(f'{time.time()}\\n')\n"
    "    time.sleep(0.01)\n"
)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
grandchild = subprocess.Popen([sys.executable, "-c", WRITER], start_new_session=True)
open("grandchild.pid", "w").write(str(grandchild.pid))
while True:
    with open("a.log", "a") as f:
        f.write(f"{time.time()}\n")
    time.sleep(0.01)
"""


def _goal(layout, goal_id: str, workdir: Path, host: Path) -> None:
    changes = GoalChanges(
        objective="edit the checkout",
        workdir=str(workdir),
        host=HostSpec(kind=HostKind.COMMAND, argv=[sys.executable, str(host), goal_id]),
    )
    add_goal(layout, goal_id, changes, update=False, default_workdir=workdir, now=utcnow())


def _turn_processes(root: Path, turn_key: str) -> list[int]:
    """Live processes of this root carrying ``turn_key``."""
    found = []
    for p in psutil.process_iter():
        try:
            env = p.environ()
            if (
                env.get("LOOPX_ROOT") == str(root)
                and env.get("LOOPX_TURN_KEY") == turn_key
                and p.status() != psutil.STATUS_ZOMBIE
            ):
                found.append(p.pid)
        except (psutil.Error, OSError):
            continue
    return found


def _last_stamp(log: Path) -> float:
    lines = [x for x in log.read_text().splitlines() if x.strip()]
    out = 0.0
    for line in lines:
        with contextlib.suppress(ValueError):  # a line cut by the kill
            out = max(out, float(line))
    return out


RUNNERS = {
    "run-once": ["-m", "loopx", "--root", "{root}", "turn", "run-once", "a"],
    "agent": ["-m", "loopx.agents", "run", "--root", "{root}", "--agent-id", "dies",
              "--idle-max-seconds", "0.5", "--heartbeat-seconds", "0.3"],
}  # fmt: skip


@pytest.mark.parametrize("runner", sorted(RUNNERS))
def test_a_turn_after_a_killed_holder_starts_when_the_dead_turns_processes_are_gone(
    tmp_path: Path, runner: str
) -> None:
    """SIGKILL `turn run-once a` (or the agent running a) mid-turn, then `turn run-once b`
    on the same workdir: b's host starts after the dead turn's last process exited."""
    root, repo = tmp_path / "root", tmp_path / "repo"
    layout = make_root(root)
    repo.mkdir()
    host = tmp_path / "host.py"
    host.write_text(HOST)
    _goal(layout, "a", repo, host)
    log = repo / "a.log"
    a = subprocess.Popen(
        [sys.executable, *(arg.format(root=root) for arg in RUNNERS[runner])],
        env=cli_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    turn_key = ""
    try:
        wait_for("a's grandchild", (repo / "grandchild.pid").exists, timeout=30)
        wait_for("a's writes", lambda: log.exists() and log.stat().st_size > 100, timeout=30)
        (journal,) = journals(root, "a")
        turn_key = journal["turn_key"]
        assert len(_turn_processes(root, turn_key)) >= 2  # the host and its grandchild
        os.kill(a.pid, signal.SIGKILL)  # the loopx process alone; its host tree runs on
        a.wait()
        killed_at = time.time()
        _goal(layout, "b", repo, host)  # only now: an agent never picks it first
        b = subprocess.run(
            [sys.executable, "-m", "loopx", "--root", str(root), "turn", "run-once", "b"],
            env=cli_env(),
            capture_output=True,
            text=True,
            timeout=45,
            check=False,
        )
        assert b.returncode == 0, b.stderr
        start = json.loads((repo / "b-start.json").read_text())
        last_a = _last_stamp(log)
        # The dead turn's processes wrote on after the kill (they ignore SIGTERM)...
        assert last_a > killed_at
        # ...and b's host started only once they had all exited.
        assert start["started"] > last_a, (start, last_a)
        assert start["seen"] == []
        assert _turn_processes(root, turn_key) == []
        (b_journal,) = journals(root, "b")
        assert b_journal["status"] == "committed"
        print(
            f"a's processes wrote until {last_a - killed_at:.2f} s after the kill; "
            f"b's host started {start['started'] - last_a:.3f} s after their last write"
        )
    finally:
        kill_everything(root, a)
        with contextlib.suppress(OSError, ValueError):
            os.kill(int((repo / "grandchild.pid").read_text()), signal.SIGKILL)
        if turn_key:
            for pid in _turn_processes(root, turn_key):
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
