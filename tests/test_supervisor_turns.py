"""The fleet running real turns of demo goals: until-idle exit codes, crashes, no overlapping turns."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from loopx import exitcodes
from tests.fleet_helpers import (
    add_demo_goal,
    assert_no_overlapping_turns,
    cli,
    host_running,
    journals,
    kill_everything,
    leftovers,
    record,
    running_agent,
    running_record,
    start_supervisor,
    wait_for,
)

pytestmark = pytest.mark.timeout(180)


def goal_status(root: Path, goal_id: str) -> str:
    return json.loads((root / "goals" / goal_id / "goal.json").read_text())["status"]


@pytest.mark.parametrize(
    ("demo_args", "expected"),
    [
        ((), 0),
        (("--kind", "needs_human", "--question", "which branch?"), exitcodes.NEEDS_HUMAN),
        (("--fail",), 1),
    ],
    ids=["done", "needs-human", "failed"],
)
def test_until_idle_exit_code(
    root: Path, tmp_path: Path, demo_args: tuple[str, ...], expected: int
) -> None:
    """--until-idle exits 0 when all goals are done, 4 when one waits for a human, 1 when one failed."""
    add_demo_goal(root, "easy", tmp_path / "w-easy", "--steps", "2")
    if demo_args:
        add_demo_goal(root, "odd", tmp_path / "w-odd", *demo_args)
    proc = start_supervisor(root, "--agents", "2", "--until-idle", "--idle-horizon-seconds", "10")
    try:
        assert proc.wait(timeout=120) == expected
        assert goal_status(root, "easy") == "done"
        assert leftovers(root) == []
    finally:
        kill_everything(root, proc)


def test_agent_sigkilled_mid_turn_is_restarted_and_the_turn_recovered(
    root: Path, tmp_path: Path
) -> None:
    """SIGKILL an agent while its host runs: it is restarted, the turn recovered, the goal finished."""
    add_demo_goal(root, "slow", tmp_path / "w", "--steps", "2", "--hang", "2")
    proc = start_supervisor(root, "--agents", "1", "--until-idle")
    try:
        victim = wait_for(
            "an agent mid-turn",
            lambda: running_agent(root, "slow") if host_running(root, "slow") else None,
        )
        os.kill(victim, signal.SIGKILL)
        assert proc.wait(timeout=150) == 0
        assert goal_status(root, "slow") == "done"
        slot = record(root)["slots"][0]  # type: ignore[index]
        assert (slot["restarts"], slot["last_exit"]) != (0, None)
        statuses = [j["status"] for j in journals(root, "slow")]
        assert statuses.count("committed") >= 2
        assert all(s in ("committed", "failed", "stopped") for s in statuses)
        assert_no_overlapping_turns(root, "slow")
        assert leftovers(root) == []
    finally:
        kill_everything(root, proc)


def test_supervisor_sigkilled_then_a_new_one_finishes(root: Path, tmp_path: Path) -> None:
    """SIGKILL the supervisor mid-run: the next one reaps the old fleet, recovers, and finishes every goal."""
    for name in ("a", "b"):
        add_demo_goal(root, name, tmp_path / f"w-{name}", "--steps", "3", "--hang", "1")
    first = start_supervisor(root, "--agents", "2")
    second = None
    try:
        wait_for("a turn in flight", lambda: running_agent(root, "a") or running_agent(root, "b"))
        first.kill()
        first.wait()
        second = start_supervisor(root, "--agents", "2", "--until-idle")
        assert second.wait(timeout=150) == 0
        assert (goal_status(root, "a"), goal_status(root, "b")) == ("done", "done")
        for name in ("a", "b"):
            assert_no_overlapping_turns(root, name)
            assert all(j["status"] != "in_progress" for j in journals(root, name))
        assert leftovers(root) == []
    finally:
        kill_everything(root, first, *([second] if second else []))


def test_sigterm_mid_turn_stops_host_and_leaves_journal_terminal_or_recoverable(
    root: Path, tmp_path: Path
) -> None:
    """SIGTERM while hosts run: exit 0 in the grace, no process left, journals stopped (or recoverable)."""
    add_demo_goal(root, "long", tmp_path / "w", "--hang", "60")
    proc = start_supervisor(root, "--agents", "1", "--stop-grace-seconds", "10")
    try:
        wait_for("the fleet", lambda: running_record(root, proc.pid, 1))
        wait_for("the host running", lambda: host_running(root, "long"))
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        assert leftovers(root) == []
        statuses = [j["status"] for j in journals(root, "long")]
        assert statuses and statuses[-1] in ("stopped", "in_progress")
        assert cli(root, "recover").returncode == 0
        assert all(
            j["status"] != "in_progress" or j["attempt"] >= 1 for j in journals(root, "long")
        )
    finally:
        kill_everything(root, proc)
