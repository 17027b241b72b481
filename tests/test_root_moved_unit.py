"""The root's path changed under a fleet run by the systemd unit.

A symlink swapped above the root leaves a working fleet; a renamed root is a
recorded stop followed by a restart.

systemd is not available to tests, so :class:`Unit` does what
``systemd/loopx-supervisor.service`` asks of it: ``ExecStartPre=loopx init``,
then ``ExecStart=loopx supervisor run``, again after ``RestartSec`` while the
exit is a failure (``Restart=on-failure``, ``RestartPreventExitStatus=2``).
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from loopx.errors import LoopxError
from loopx.root.held import NOTE_NAME
from tests.fleet_helpers import kill_everything, wait_for
from tests.turnkit import cli_env, demo_goal, make_root

RESTART_S = 0.5  # the unit's RestartSec=5s, shortened


class Unit:
    """``loopx-supervisor.service`` under ``Restart=on-failure``, for one root path."""

    def __init__(self, root: Path, log: Path) -> None:
        self.root, self.log = root, log
        self.exits: list[int] = []
        self.current: subprocess.Popen[bytes] | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _cmd(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "loopx", "--root", str(self.root), *args]

    def _run(self) -> None:
        while not self._stop.is_set():
            with self.log.open("ab") as out:
                subprocess.run(
                    self._cmd("init"), env=cli_env(), stdout=out, stderr=out, check=False
                )
                self.current = subprocess.Popen(
                    self._cmd("supervisor", "run", "--agents", "1"),
                    env=cli_env(),
                    stdout=out,
                    stderr=out,
                )
            code = self.current.wait()
            self.exits.append(code)
            if code in (0, 2) or self._stop.wait(RESTART_S):
                return

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self.current is not None:
            kill_everything(self.root, self.current)
        self._thread.join(timeout=30)


def _count(log: Path, needle: str) -> int:
    return log.read_text(errors="replace").count(needle) if log.exists() else 0


def _modes(top: Path) -> dict[str, int]:
    return {
        str(p.relative_to(top)): stat.S_IMODE(p.lstat().st_mode)
        for p in [top, *top.rglob("*")]
        if p.is_dir() and not p.is_symlink()
    }


def _history(root: Path, goal_id: str) -> int:
    path = root / "goals" / goal_id / "history.jsonl"
    return len(path.read_text().splitlines()) if path.exists() else 0


@pytest.mark.timeout(240)
def test_a_symlink_swap_above_the_root_leaves_a_working_fleet(tmp_path: Path) -> None:
    """Given a fleet started on link/root, swapping link elsewhere changes nothing for it: the
    root's path was resolved at start, so it keeps working on the directory it opened."""
    first, second = tmp_path / "a", tmp_path / "b"
    layout = make_root(first / "root")
    demo_goal(layout, "g", tmp_path / "work", "--steps", "4", "--hang", "0.5")
    second.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(first)
    log = tmp_path / "unit.log"
    unit = Unit(link / "root", log)
    unit.start()
    try:
        wait_for("a first turn", lambda: _history(first / "root", "g") >= 1, timeout=90)
        swap = tmp_path / "link.new"
        swap.symlink_to(second)
        swap.rename(link)  # atomic, as a deploy swaps a `current` link
        wait_for("the goal done", lambda: _history(first / "root", "g") >= 4, timeout=90)
        assert unit.exits == []  # never stopped
        assert unit.current is not None
        assert unit.current.poll() is None
        assert list(second.iterdir()) == []  # nothing made at the link's new target
    finally:
        unit.stop()
    assert "Traceback" not in log.read_text(errors="replace")


@pytest.mark.timeout(240)
def test_a_renamed_root_under_the_unit_is_a_recorded_stop_then_a_restart(tmp_path: Path) -> None:
    """Given a fleet on state/loopx under the unit, rename the root: the supervisor and its
    agent stop saying why (no traceback), the unit restarts it on the path (whose `init`,
    as systemd's StateDirectory= would, makes a fresh root there); the original, moved
    back while the unit is stopped, reports the recorded stop at its next start."""
    state = tmp_path / "state"  # /var/lib: the directory above the root, never touched
    state.mkdir(mode=0o700)
    root = state / "loopx"
    layout = make_root(root)
    demo_goal(layout, "g", tmp_path / "work", "--steps", "1000", "--kind", "wait",
              "--wait-seconds", "3600")  # fmt: skip
    log = tmp_path / "unit.log"
    unit = Unit(root, log)
    unit.start()
    moved = state / "loopx.moved"
    try:
        wait_for("the fleet", lambda: _count(log, "supervisor_ready") == 1, timeout=60)
        wait_for("an agent", (root / "agents" / "agent-1.json").exists, timeout=60)
        wait_for("a first turn", lambda: _history(root, "g") >= 1, timeout=60)
        os.rename(root, moved)
        wait_for("the restart", lambda: _count(log, "supervisor_ready") == 2, timeout=90)
        assert unit.exits == [1]
        assert _count(log, '"root_moved"') >= 1
        assert (moved / NOTE_NAME).exists()  # the stop is recorded in the root itself
        agent_log = (moved / "logs" / "agent-1.log").read_text()
        assert "agent_stopped" in agent_log
        assert "Traceback" not in agent_log
        assert sorted(p.name for p in state.iterdir()) == ["loopx", "loopx.moved"]
    finally:
        unit.stop()
    # The operator moves the original back while the unit is stopped, then starts it.
    shutil.rmtree(root)
    os.rename(moved, root)
    again = Unit(root, log)
    again.start()
    try:
        wait_for(
            "the previous stop reported",
            lambda: _count(log, "previous_stop_root_moved") >= 1,
            timeout=60,
        )
        wait_for("the fleet again", lambda: _count(log, "supervisor_ready") == 3, timeout=60)
        assert not (root / NOTE_NAME).exists()  # read once, then removed
        assert _history(root, "g") >= 1  # the original root, with its goal's past
    finally:
        again.stop()
    assert "Traceback" not in log.read_text(errors="replace")
    bad = {k: oct(v) for k, v in _modes(state).items() if v != 0o700}
    assert bad == {}, bad


def test_loopx_creates_no_directory_above_an_opened_root_and_only_0700_dirs(tmp_path: Path) -> None:
    """A root whose parent was renamed away: a turn's writes recreate nothing at the old path."""
    from loopx.agents.turn import attempt_turn

    old = os.umask(0o022)
    try:
        layout = make_root(tmp_path / "parent" / "root")
        demo_goal(layout, "g", tmp_path / "work")
        os.rename(tmp_path / "parent", tmp_path / "moved")
        with pytest.raises((LoopxError, OSError)):  # RootMovedError, or the missing file
            attempt_turn(layout, "g", agent_id="a")
        assert not (tmp_path / "parent").exists()
        os.rename(tmp_path / "moved", tmp_path / "parent")
        attempt = attempt_turn(layout, "g", agent_id="a")
        assert attempt.report is not None
    finally:
        os.umask(old)
    bad = {k: oct(v) for k, v in _modes(tmp_path / "parent").items() if v != 0o700}
    assert bad == {}, bad
