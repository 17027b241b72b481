"""Real Gemini CLI (pinned in .ci/setup.d/realhosts.sh) driven by LoopX against the mock model."""

from __future__ import annotations

import json
import shutil
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from tests.realhosts.conftest import add_goal, goal_state, releases, run_once

pytestmark = [pytest.mark.realhosts, pytest.mark.timeout(240)]
STREAM = "/v1beta/models/gemini-mock:streamGenerateContent"


def _contents(body: dict[str, Any] | None) -> str:
    return json.dumps((body or {}).get("contents", []))


@pytest.mark.parametrize("release", releases("gemini"), indirect=True)
def test_turn_commits_resumes_with_history_and_records_tokens(cli, gemini_env, mock, tmp_path):
    """Two turns: both commit; the second resumes the session with turn one's exchange."""
    add_goal(cli, gemini_env, "g1", "gemini", tmp_path / "work")
    first = run_once(cli, "g1", gemini_env)
    session = goal_state(cli, "g1")["host_session"]["session_id"]
    mock.model.answer = json.dumps({"kind": "progress", "summary": "second", "next_action": "go"})
    second = run_once(cli, "g1", gemini_env)
    assert (first["status"], first["kind"], second["status"]) == (
        "committed",
        "progress",
        "committed",
    )
    assert second["result"]["summary"] == "second"
    requests = mock.model.model_requests(STREAM)
    assert len(requests) == 2
    assert "mock model turn" in _contents(requests[1].body)  # the history came along
    assert requests[0].headers.get("x-goog-api-key") == "mock-gemini-key"
    assert (first["usage"]["input_tokens"], first["usage"]["output_tokens"]) == (1200, 80)
    assert (second["usage"]["input_tokens"], second["usage"]["output_tokens"]) == (1200, 80)
    state = goal_state(cli, "g1")["host_session"]
    assert (state["session_id"], state["turns"]) == (session, 2)


def test_tool_call_runs_and_the_turn_commits(cli, gemini_env, mock, tmp_path):
    """The model calls run_shell_command; Gemini CLI runs it (yolo) and sends the output back."""
    mock.model.mode = "tool"
    work = tmp_path / "work"
    add_goal(cli, gemini_env, "g1", "gemini", work, "--host=--approval-mode yolo")
    (work / "marker.txt").write_text("x")
    report = run_once(cli, "g1", gemini_env)
    assert report["status"] == "committed", report
    answers = [
        r for r in mock.model.model_requests(STREAM) if "functionResponse" in _contents(r.body)
    ]
    assert answers
    assert "marker.txt" in _contents(answers[0].body)


def test_daily_quota_waits_until_midnight_pacific(cli, gemini_env, mock, tmp_path):
    """`You have exhausted your daily quota on this model.` waits until the quota's reset."""
    mock.model.mode = "usage_limit"
    mock.model.reset_at = int(time.time()) + 3600
    add_goal(cli, gemini_env, "g1", "gemini", tmp_path / "work")
    report = run_once(cli, "g1", gemini_env)
    assert (report["status"], report["kind"]) == ("committed", "wait"), report
    assert report["result"]["evidence"] == ["host_rate_limited"]
    pacific = datetime.now(ZoneInfo("America/Los_Angeles"))
    midnight = datetime.combine(
        pacific.date() + timedelta(days=1), datetime.min.time(), pacific.tzinfo
    )
    expected = (midnight - pacific).total_seconds()
    assert abs(report["result"]["wait_seconds"] - max(expected, 60)) < 180, report["result"]


def test_rate_limit_429_waits_the_suggested_delay(cli, gemini_env, mock, tmp_path):
    """A per-minute 429 with `Please retry in 120s.` is a committed wait of 120 s."""
    mock.model.mode = "429"
    add_goal(cli, gemini_env, "g1", "gemini", tmp_path / "work")
    report = run_once(cli, "g1", gemini_env)
    assert (report["kind"], report["result"]["evidence"]) == ("wait", ["host_rate_limited"])
    assert report["result"]["wait_seconds"] == 120


def test_rejected_key_is_host_auth(cli, gemini_env, mock, tmp_path):
    """HTTP 401 UNAUTHENTICATED ends the turn failed with host_auth and a hint."""
    mock.model.mode = "401"
    add_goal(cli, gemini_env, "g1", "gemini", tmp_path / "work")
    report = run_once(cli, "g1", gemini_env)
    assert (report["status"], report["failure"]["reason"]) == ("failed", "host_auth"), report
    assert "GEMINI_API_KEY" in report["failure"]["message"]


def test_server_error_is_a_bounded_wait(cli, gemini_env, mock, tmp_path):
    """HTTP 500 commits a host_server_error wait of 5 minutes."""
    mock.model.mode = "500"
    add_goal(cli, gemini_env, "g1", "gemini", tmp_path / "work")
    report = run_once(cli, "g1", gemini_env)
    assert (report["status"], report["kind"]) == ("committed", "wait"), report
    assert report["result"]["evidence"] == ["host_server_error"]
    assert report["result"]["wait_seconds"] == 300


def test_unreachable_server_is_a_wait(cli, gemini_env, mock, tmp_path):
    """`fetch failed sending request` commits a host_unreachable wait."""
    mock.unreachable()
    add_goal(cli, gemini_env, "g1", "gemini", tmp_path / "work")
    report = run_once(cli, "g1", gemini_env)
    assert (report["status"], report["kind"]) == ("committed", "wait"), report
    assert report["result"]["evidence"] == ["host_unreachable"]


def test_unreachable_server_while_retrying_is_stopped_within_the_bound(
    cli, gemini_env, mock, tmp_path
):
    """With its default 10 retries Gemini CLI retries for minutes; LoopX stops it and waits."""
    settings = Path(gemini_env["GEMINI_CLI_HOME"]) / ".gemini" / "settings.json"
    config = json.loads(settings.read_text())
    del config["general"]["maxAttempts"]
    settings.write_text(json.dumps(config))
    mock.unreachable()
    add_goal(cli, gemini_env, "g1", "gemini", tmp_path / "work", "--unreachable-after", "3",
             "--turn-timeout", "200")  # fmt: skip
    report = run_once(cli, "g1", gemini_env)
    assert (report["status"], report["kind"]) == ("committed", "wait"), report.get("failure")
    assert report["result"]["evidence"] == ["host_unreachable"]
    assert report["usage"]["wall_s"] < 60


def test_hanging_server_ends_in_turn_timeout(cli, gemini_env, mock, tmp_path):
    """A server that never answers: the turn is killed at its timeout, typed turn_timeout."""
    mock.model.mode = "hang"
    add_goal(cli, gemini_env, "g1", "gemini", tmp_path / "work", "--turn-timeout", "8")
    report = run_once(cli, "g1", gemini_env)
    assert (report["status"], report["failure"]["reason"]) == ("failed", "turn_timeout")


def test_lost_session_drops_it(cli, gemini_env, mock, tmp_path):
    """Gemini CLI cannot find the session: a typed failure, and the next turn starts fresh."""
    add_goal(cli, gemini_env, "g1", "gemini", tmp_path / "work")
    run_once(cli, "g1", gemini_env)
    shutil.rmtree(Path(gemini_env["GEMINI_CLI_HOME"]) / ".gemini" / "tmp")
    lost = run_once(cli, "g1", gemini_env)
    assert lost["failure"]["reason"] == "host_execution_error", lost
    assert "Error resuming session" in lost["failure"]["message"]
    assert goal_state(cli, "g1")["host_session"]["session_id"] == ""
