"""`--until-idle` judges a goal's wait by the goal's own next-eligible time on the fleet's clock.

A fleet whose clock is an hour behind the files' (``faketime -1h``) once ended
its run as blocked (exit 4) 10-15 s in, while a goal waited 20 s: the
supervisor compared the goal's recorded instant with its own clock, which
made the wait look an hour long. The supervisor now reads the goals' times on
the clock the agents use (calibrated against the files), and reads a wait
recorded ahead of its clock as every decision does (``GoalState.eligible_at``).
"""

from __future__ import annotations

import json
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from loopx import environ, exitcodes
from loopx.agents.turn import attempt_turn
from loopx.model import current_offset, set_clock_offset, utcnow
from loopx.registry.goalrecords import HostKind
from loopx.root import Layout
from loopx.state import load_state
from loopx.supervisor.config import SupervisorConfig
from loopx.supervisor.idle import Outcome, idle_verdict
from loopx.supervisor.progress import goal_progress
from loopx.supervisor.supervisor import Supervisor
from tests.faketime import LIBFAKETIME
from tests.fleet_helpers import kill_everything, start_supervisor
from tests.turnkit import demo_goal, make_root

HORIZON = timedelta(seconds=60)
# A host whose first turn asks to wait 20 s and whose second completes the goal.
WAIT_THEN_DONE = f"""
import json, os, pathlib, sys
sys.stdin.read()
seen = pathlib.Path("turns")
n = int(seen.read_text()) + 1 if seen.exists() else 1
seen.write_text(str(n))
done = {{"kind": "completed", "summary": "done"}}
wait = {{"kind": "wait", "wait_seconds": 20, "summary": "come back in 20 s"}}
pathlib.Path(os.environ["{environ.RESULT_FILE}"]).write_text(json.dumps(wait if n == 1 else done))
"""


def _goal_waiting_20_s(tmp_path: Path) -> Layout:
    """A root whose goal ran one turn that asked to wait 20 s (on the true clock)."""
    layout = make_root(tmp_path / "root")
    demo_goal(
        layout, "g", tmp_path / "work", "--steps", "2", "--kind", "wait", "--wait-seconds", "20"
    )
    first = attempt_turn(layout, "g", agent_id="a")
    assert first.report is not None
    assert first.report.failure is None
    state = load_state(layout, "g")
    assert state.next_eligible_at is not None
    assert state.next_eligible_at > utcnow() + timedelta(seconds=10)
    return layout


def test_a_wait_recorded_ahead_of_the_clock_is_progress_not_blocked(tmp_path: Path) -> None:
    """Given a goal waiting 20 s, read on a clock an hour behind: it is progressing, not idle."""
    layout = _goal_waiting_20_s(tmp_path)
    behind = utcnow() - timedelta(hours=1)
    verdict = idle_verdict(goal_progress(layout, now=behind), now=behind, horizon=HORIZON)
    assert (verdict.idle, verdict.outcomes) == (False, {"g": Outcome.PROGRESSING})


def test_the_supervisor_does_not_call_a_short_wait_blocked_on_a_clock_behind(
    tmp_path: Path,
) -> None:
    """Given this process's clock an hour behind the files', two idle checks request no stop."""
    layout = _goal_waiting_20_s(tmp_path)
    sup = Supervisor(layout, SupervisorConfig(agents=0, until_idle=True))
    saved = current_offset()
    set_clock_offset(timedelta(hours=1))  # utcnow() an hour behind, as faketime -1h makes it
    try:
        sup._check_idle(0.0)
        sup._check_idle(1.0)
        assert sup.stop_requests == 0
        assert current_offset() == timedelta(0)  # calibrated against the files' clock
    finally:
        set_clock_offset(saved)


@pytest.mark.timeout(180)
def test_until_idle_under_a_clock_an_hour_behind_finishes_a_goal_that_waits_20_s(
    tmp_path: Path,
) -> None:
    """Given a goal of two turns 20 s apart, `--until-idle` under faketime -1h exits 0, done."""
    if LIBFAKETIME is None:
        pytest.skip("libfaketime is not installed (apt install faketime)")
    layout = make_root(tmp_path / "root")
    demo_goal(layout, "g", tmp_path / "work", sys.executable, "-c", WAIT_THEN_DONE,
              kind=HostKind.COMMAND)  # fmt: skip
    sup = start_supervisor(
        layout.root,
        "--agents",
        "1",
        "--until-idle",
        log=tmp_path / "supervisor.log",
        LD_PRELOAD=LIBFAKETIME,
        FAKETIME="-1h",
        FAKETIME_DONT_FAKE_MONOTONIC="1",
    )
    try:
        assert sup.wait(timeout=150) == exitcodes.OK, (tmp_path / "supervisor.log").read_text()
        history = (layout.goal_dir("g") / "history.jsonl").read_text().splitlines()
        assert [json.loads(line)["kind"] for line in history] == ["wait", "completed"]
    finally:
        kill_everything(layout.root, sup)
