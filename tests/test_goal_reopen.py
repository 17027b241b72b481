"""Finished work is protected: a done goal is neither paused nor resumed; reopen asks first."""

from __future__ import annotations

import pytest

from loopx.errors import GoalStateError
from loopx.registry.goalrecords import GoalStatus
from loopx.registry.lifecycle import GoalDoneError, NotDoneError, StatusRequest, target_status
from tests.conftest import Cli

DONE_LINE = "loopx: error: goal g is done; `loopx goal reopen g` runs it again"


@pytest.fixture
def cli(cli: Cli) -> Cli:
    """What commands print and decide is the point here: the CLI runs in this process."""
    return cli.in_process()


@pytest.mark.parametrize(
    ("current", "request_", "outcome"),
    [
        (GoalStatus.ACTIVE, StatusRequest.PAUSE, GoalStatus.PAUSED),
        (GoalStatus.PAUSED, StatusRequest.RESUME, GoalStatus.ACTIVE),
        (GoalStatus.PAUSED, StatusRequest.DONE, GoalStatus.DONE),
        (GoalStatus.DONE, StatusRequest.DONE, GoalStatus.DONE),
        (GoalStatus.DONE, StatusRequest.REOPEN, GoalStatus.ACTIVE),
        (GoalStatus.ACTIVE, StatusRequest.REOPEN, GoalStatus.ACTIVE),
        (GoalStatus.DONE, StatusRequest.PAUSE, GoalDoneError),
        (GoalStatus.DONE, StatusRequest.RESUME, GoalDoneError),
        (GoalStatus.PAUSED, StatusRequest.REOPEN, NotDoneError),
        (GoalStatus.ARCHIVED, StatusRequest.RESUME, GoalStateError),
    ],
)
def test_the_status_rules(
    current: GoalStatus, request_: StatusRequest, outcome: GoalStatus | type[Exception]
) -> None:
    """Each request on each status: the status it gives, or the refusal."""
    if isinstance(outcome, GoalStatus):
        assert target_status("g", current, request_) is outcome
    else:
        with pytest.raises(outcome):
            target_status("g", current, request_)


def test_pause_and_resume_of_a_done_goal_are_refused_in_one_line(cli: Cli) -> None:
    """`goal pause` and `goal resume` of a done goal exit 1 naming `goal reopen`, changing nothing."""
    cli.run("goal", "add", "g", "--objective", "a", check=True)
    cli.run("goal", "done", "g", check=True)
    for action in ("pause", "resume"):
        proc = cli.run("goal", action, "g")
        assert (proc.returncode, proc.stderr.splitlines()[0]) == (1, DONE_LINE)
    assert cli.json("goal", "show", "g")["goal"]["status"] == "done"


def test_reopen_asks_for_yes(cli: Cli) -> None:
    """Without --yes reopen is a usage error that changes nothing; with it the goal is active."""
    cli.run("goal", "add", "g", "--objective", "a", check=True)
    cli.run("goal", "done", "g", check=True)
    refused = cli.run("goal", "reopen", "g")
    assert refused.returncode == 2
    assert "--yes" in refused.stderr
    assert cli.json("goal", "show", "g")["goal"]["status"] == "done"
    reopened = cli.json("goal", "reopen", "g", "--yes")
    assert (reopened["goal"]["status"], reopened["repeated"]) == ("active", False)
    assert cli.json("goal", "reopen", "g", "--yes")["repeated"] is True


def test_reopen_of_a_paused_goal_points_at_resume(cli: Cli) -> None:
    """A paused goal is not done: reopen refuses it and names `goal resume`."""
    cli.run("goal", "add", "g", "--objective", "a", check=True)
    cli.run("goal", "pause", "g", check=True)
    proc = cli.run("goal", "reopen", "g", "--yes")
    assert proc.returncode == 1
    assert "loopx goal resume g" in proc.stderr
