"""A clock behind the recorded times does not stall a goal that asked to wait.

The goal's state was written on the true clock ("wait 20 s"); a fleet whose
clock is an hour behind (``faketime``) runs it within a minute of when it
asked, not an hour later: decisions count a wait recorded in the future of
``now`` from ``now`` (``GoalState.eligible_at``).
"""

from __future__ import annotations

import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from loopx.agents.turn import attempt_turn
from loopx.model import utcnow
from loopx.state import GoalState, load_state
from tests.faketime import LIBFAKETIME
from tests.fleet_helpers import kill_everything, start_supervisor, wait_for
from tests.turnkit import demo_goal, make_root


def test_a_wait_recorded_in_this_clocks_future_is_served() -> None:
    """Pure: a state dated an hour ahead of this clock: its wait counts as served, stably."""
    now = datetime(2026, 1, 1, tzinfo=UTC)
    ahead = now + timedelta(hours=1)
    state = GoalState(goal_id="g", updated_at=ahead, next_eligible_at=ahead + timedelta(seconds=20))
    assert state.eligible_at(now) == now
    assert state.eligible_at(ahead) == ahead + timedelta(seconds=20)


@pytest.mark.timeout(240)
def test_a_wait_20_goal_under_a_clock_an_hour_behind_runs_within_a_minute(tmp_path: Path) -> None:
    """Given a turn that asked to wait 20 s, a fleet an hour behind runs the next within 80 s."""
    if LIBFAKETIME is None:
        pytest.skip("libfaketime is not installed (apt install faketime)")
    layout = make_root(tmp_path / "root")
    demo_goal(
        layout, "g", tmp_path / "work", "--steps", "50", "--kind", "wait", "--wait-seconds", "20"
    )
    first = attempt_turn(layout, "g", agent_id="a")
    assert first.report is not None
    assert first.report.failure is None
    state = load_state(layout, "g")
    assert state.next_eligible_at is not None
    assert state.next_eligible_at > utcnow() + timedelta(seconds=10)
    asked = time.monotonic()
    history = layout.goal_dir("g") / "history.jsonl"
    sup = start_supervisor(
        layout.root,
        "--agents",
        "1",
        LD_PRELOAD=LIBFAKETIME,
        FAKETIME="-1h",
        FAKETIME_DONT_FAKE_MONOTONIC="1",
    )
    try:
        wait_for(
            "the second turn",
            lambda: len(history.read_text().splitlines()) >= 2,
            timeout=20 + 60,
            every=0.2,
        )
        assert 10 < time.monotonic() - asked < 20 + 60
        assert sys.executable  # the supervisor ran this interpreter
    finally:
        kill_everything(layout.root, sup)
