"""`doctor --repair` of future-dated states leaves `replay --verify` clean.

The turns are dated by the true clock; doctor then runs under a clock two
hours behind (Debian's ``faketime``: the system clock stepped back after the
fleet wrote), so every state is dated two hours in its future. The repair
records each shift in ``clock-shifts.jsonl`` and replay applies it, so the
journals and the repaired states agree, done goals included.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from loopx.agents.turn import attempt_turn
from loopx.clock import repair_future_dated
from loopx.model import utcnow
from loopx.root import Layout
from loopx.state import load_state
from loopx.storage.files import atomic_write_model
from loopx.turn.clockshift import read_shifts, record_shift
from loopx.turn.replay import replay
from tests.faketime import faketime_env, needs_faketime
from tests.turnkit import cli_env, demo_goal, make_root


def _behind(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The real CLI under a clock two hours behind the one that wrote the root."""
    return subprocess.run(
        [sys.executable, "-m", "loopx", "--root", str(root), *args],
        capture_output=True,
        text=True,
        env=cli_env(**faketime_env("-2h")),
        timeout=120,
        check=False,
    )


def _turn(layout: Layout, goal_id: str) -> None:
    attempt = attempt_turn(layout, goal_id, agent_id="a")
    assert attempt.report is not None, attempt
    assert attempt.report.failure is None, attempt.report


def _verify(root: Path, goal_id: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-m", "loopx", "--root", str(root), "replay", goal_id, "--verify"],
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=60,
        check=False,
    )
    return [] if done.returncode == 0 else [done.stdout + done.stderr]


@needs_faketime
@pytest.mark.timeout(180)
def test_repair_of_future_dates_leaves_replay_verify_clean(tmp_path: Path) -> None:
    """Given done, waiting and working goals dated 2 h ahead, repair then replay agree."""
    layout = make_root(tmp_path / "root")
    demo_goal(layout, "done", tmp_path / "w-done", "--steps", "2")
    demo_goal(
        layout, "waits", tmp_path / "w-waits", "--steps", "50", "--kind", "wait",
        "--wait-seconds", "3600",
    )  # fmt: skip
    demo_goal(layout, "works", tmp_path / "w-works", "--steps", "50")
    for goal_id in ("done", "done", "waits", "works"):
        _turn(layout, goal_id)
    assert json.loads(layout.goal_file("done").read_text())["status"] == "done"
    asked = load_state(layout, "waits")
    assert asked.next_eligible_at is not None
    assert asked.updated_at is not None
    assert all(_verify(layout.root, g) == [] for g in ("done", "waits", "works"))

    # When doctor's clock is two hours behind the root, the repair dates every state back.
    repaired = _behind(layout.root, "doctor", "--repair")
    assert repaired.stdout.count("repaired:") == 3, repaired.stdout + repaired.stderr
    after = load_state(layout, "waits")
    assert after.updated_at is not None
    assert after.next_eligible_at is not None
    assert after.updated_at < utcnow() - timedelta(hours=1, minutes=50)
    wait = asked.next_eligible_at - asked.updated_at
    assert after.next_eligible_at - after.updated_at == wait  # the wait it asked is kept

    # Then replay derives the repaired files from the journals, done goal included.
    assert [_verify(layout.root, g) for g in ("done", "waits", "works")] == [[], [], []]
    report = json.loads(_behind(layout.root, "doctor", "--json").stdout)
    assert report["healthy"], [(f["severity"], f["code"], f["problem"]) for f in report["findings"]]
    state_findings = [
        f for f in report["findings"] if f["code"] == "future_dated" and "state" in f["path"]
    ]
    assert state_findings == []
    # A turn after the repair is planned from the shifted state: the chain holds too.
    _turn(layout, "works")
    assert _verify(layout.root, "works") == []
    assert replay(layout, "works", verify=True).clean


def test_a_repair_that_died_before_its_state_write_is_finished_with_its_instant(
    tmp_path: Path,
) -> None:
    """Given a shift recorded but no state written, the next repair uses the recorded instant."""
    layout = make_root(tmp_path / "root")
    demo_goal(layout, "g", tmp_path / "w", "--steps", "50")
    _turn(layout, "g")
    state = load_state(layout, "g")
    ahead = state.model_copy(update={"updated_at": utcnow() + timedelta(hours=3)})
    atomic_write_model(layout.state_file("g"), ahead)
    first = utcnow()
    record_shift(layout, ahead, first, now=first)  # the repair died here

    assert repair_future_dated(layout, ["g"], now=first + timedelta(minutes=1)) == ["g"]
    assert load_state(layout, "g").updated_at == first
    assert len(read_shifts(layout, "g")) == 1
