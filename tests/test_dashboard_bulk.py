"""The dashboard's status actions: finished work is protected, bulk pause and resume are one batch."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from loopx.api._serve import action_calls
from loopx.model import utcnow
from loopx.registry.goalrecords import GoalStatus
from loopx.registry.goals import get_goal
from loopx.testing.dashboard_fixtures import seed_fleet_root
from loopx.web.server import HttpServer, make_server
from tests.test_dashboard_server import AUTH, JSON_AUTH, TOKEN, audit_lines, call
from tests.test_server import running

DONE = "goal-00009"  # seed_fleet_root: every tenth goal from the tenth is done
PAUSED = "goal-00006"


@pytest.fixture
def server(layout, tmp_path) -> Iterator[HttpServer]:
    seed_fleet_root(layout, 20, now=utcnow(), workdir=tmp_path)
    yield from running(
        make_server(
            layout,
            port=0,
            token=TOKEN,
            actions=action_calls(layout),
            refresh_interval_s=0.2,
            ttl_s=0.0,
            request_timeout_s=2.0,
        )
    )


def post(server, path, doc, headers=JSON_AUTH):
    return call(server, "POST", path, headers, json.dumps(doc).encode())


@pytest.mark.parametrize("action", ["pause", "resume"])
def test_pause_and_resume_of_a_done_goal_are_409_and_change_nothing(server, layout, action):
    """The server refuses them with the CLI's line; the goal stays done; the attempt is audited."""
    status, doc = post(server, f"/api/goals/{DONE}/{action}", {})
    assert (status, doc["error"]) == (
        409,
        f"goal {DONE} is done; `loopx goal reopen {DONE}` runs it again",
    )
    assert get_goal(layout, DONE).status is GoalStatus.DONE
    assert [r["outcome"] for r in audit_lines(layout)] == ["failed"]


def test_reopen_makes_a_done_goal_active(server, layout):
    """`reopen` is the one action that runs finished work again."""
    status, doc = post(server, f"/api/goals/{DONE}/reopen", {})
    assert (status, doc["goal_status"], doc["repeated"]) == (200, "active", False)
    assert get_goal(layout, DONE).status is GoalStatus.ACTIVE


def test_bulk_pause_applies_each_goal_and_refuses_the_done_one(server, layout):
    """One request: the active goals pause, the done one is refused on its own, all audited."""
    ids = ["goal-00003", "goal-00004", DONE]
    status, doc = post(server, "/api/bulk/pause", {"goal_ids": ids})
    assert status == 200
    outcomes = [(r["goal_id"], r["outcome"], r["status"]) for r in doc["results"]]
    assert outcomes == [
        ("goal-00003", "applied", 200),
        ("goal-00004", "applied", 200),
        (DONE, "failed", 409),
    ]
    assert (doc["applied"], doc["refused"]) == (2, 1)
    assert "loopx goal reopen" in doc["results"][2]["error"]
    assert [get_goal(layout, i).status for i in ids] == [
        GoalStatus.PAUSED,
        GoalStatus.PAUSED,
        GoalStatus.DONE,
    ]
    assert [(r["action"], r["goal_id"], r["outcome"]) for r in audit_lines(layout)] == [
        ("pause", "goal-00003", "applied"),
        ("pause", "goal-00004", "applied"),
        ("pause", DONE, "failed"),
    ]


def test_bulk_resume_of_a_resumed_goal_is_repeated(server, layout):
    """A goal already active is "repeated" and its file is not written again."""
    status, doc = post(server, "/api/bulk/resume", {"goal_ids": [PAUSED, "goal-00003"]})
    assert status == 200
    assert [r["outcome"] for r in doc["results"]] == ["applied", "repeated"]
    assert get_goal(layout, PAUSED).status is GoalStatus.ACTIVE


@pytest.mark.parametrize(
    ("path", "doc", "headers", "expected"),
    [
        ("/api/bulk/done", {"goal_ids": ["goal-00003"]}, JSON_AUTH, 404),
        ("/api/bulk/pause", {"goal_ids": []}, JSON_AUTH, 400),
        ("/api/bulk/pause", {"goal_ids": [f"g{i}" for i in range(101)]}, JSON_AUTH, 400),
        (
            "/api/bulk/pause",
            {"goal_ids": ["goal-00003"]},
            {"Content-Type": "application/json"},
            401,
        ),
        (
            "/api/bulk/pause",
            {"goal_ids": ["goal-00003"]},
            {**JSON_AUTH, "Sec-Fetch-Site": "cross-site"},
            403,
        ),
        (
            "/api/bulk/pause",
            {"goal_ids": ["goal-00003"]},
            {**AUTH, "Content-Type": "text/plain"},
            415,
        ),
    ],
)
def test_bulk_requests_pass_the_action_gates(server, layout, path, doc, headers, expected):  # noqa: PLR0917
    """An unknown bulk action, a bad body, no token, cross-site, a form: refused, nothing paused."""
    assert post(server, path, doc, headers)[0] == expected
    assert get_goal(layout, "goal-00003").status is GoalStatus.ACTIVE
    assert [r["outcome"] for r in audit_lines(layout)] == ["refused"]
