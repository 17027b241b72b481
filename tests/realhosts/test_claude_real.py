"""Real Claude Code (pinned in .ci/setup.d/realhosts.sh) driven by LoopX against the mock model."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from tests.realhosts.conftest import add_goal, goal_state, releases, run_once
from tests.realhosts.donecheck_case import false_then_true_completed

pytestmark = [pytest.mark.realhosts, pytest.mark.timeout(240)]


def _messages(body: dict[str, Any] | None) -> str:
    return json.dumps((body or {}).get("messages", []))


@pytest.mark.parametrize("release", releases("claude"), indirect=True)
def test_turn_commits_resumes_with_history_and_records_cost(cli, claude_env, mock, tmp_path):
    """Two turns: both commit; the second resumes the session with turn one's exchange.

    Each turn's cost is its own: Claude Code 2.1.332 prints the session's total,
    and the second turn's share of it equals the first's (the mock bills alike).
    """
    add_goal(cli, claude_env, "k1", "claude", tmp_path / "work")
    first = run_once(cli, "k1", claude_env)
    session = goal_state(cli, "k1")["host_session"]["session_id"]
    mock.model.answer = json.dumps({"kind": "progress", "summary": "second", "next_action": "go"})
    second = run_once(cli, "k1", claude_env)
    assert (first["status"], first["kind"], second["status"]) == (
        "committed",
        "progress",
        "committed",
    )
    assert second["result"]["summary"] == "second"
    requests = mock.model.model_requests("/v1/messages")
    assert "mock model turn" in _messages(requests[-1].body)  # the history came along
    assert (first["usage"]["input_tokens"], first["usage"]["output_tokens"]) == (1200, 80)
    assert first["usage"]["cost_usd"] > 0
    assert second["usage"]["cost_usd"] == pytest.approx(first["usage"]["cost_usd"])
    assert (second["usage"]["input_tokens"], second["usage"]["output_tokens"]) == (1200, 80)
    state = goal_state(cli, "k1")["host_session"]
    assert (state["session_id"], state["turns"]) == (session, 2)


def test_tool_call_runs_and_the_turn_commits(cli, claude_env, mock, tmp_path):
    """The model calls Bash; Claude Code runs it and sends the result back before answering."""
    mock.model.mode = "tool"
    work = tmp_path / "work"
    add_goal(cli, claude_env, "k1", "claude", work, "--host=--allowedTools Bash")
    (work / "marker.txt").write_text("x")
    report = run_once(cli, "k1", claude_env)
    assert report["status"] == "committed", report
    tool_results = [
        r for r in mock.model.model_requests("/v1/messages") if "tool_result" in _messages(r.body)
    ]
    assert tool_results
    assert "marker.txt" in _messages(tool_results[0].body)


@pytest.mark.parametrize(("claim", "days"), [("five_hour", 0.1), ("seven_day", 3)])
def test_usage_limit_waits_until_the_printed_reset(  # noqa: PLR0917 - fixtures and parameters
    cli, claude_env, mock, tmp_path, claim, days
):
    """`You've hit your session limit · resets 8:56pm (Europe/Berlin)` (or weekly, with a date)."""
    mock.model.mode = "usage_limit"
    mock.model.limit_claim = claim
    mock.model.reset_at = int(time.time() + days * 86400)
    add_goal(cli, claude_env, "k1", "claude", tmp_path / "work")
    report = run_once(cli, "k1", claude_env)
    assert (report["status"], report["kind"]) == ("committed", "wait"), report
    assert report["result"]["evidence"] == ["host_rate_limited"]
    assert abs(report["result"]["wait_seconds"] - days * 86400) < 180, report["result"]


def test_rate_limit_429_is_a_wait(cli, claude_env, mock, tmp_path):
    """A plain 429 (api_error_status 429) is a committed wait."""
    mock.model.mode = "429"
    add_goal(cli, claude_env, "k1", "claude", tmp_path / "work")
    report = run_once(cli, "k1", claude_env)
    # No reset in the message: the minimum wait, and the account backs off.
    assert (report["kind"], report["result"]["evidence"]) == (
        "wait",
        ["host_rate_limited", "rate_limit_reset_unknown"],
    )
    assert report["result"]["wait_seconds"] == 60


def test_server_error_is_a_bounded_wait(cli, claude_env, mock, tmp_path):
    """HTTP 500 (api_error_status 500) commits a host_server_error wait of 5 minutes."""
    mock.model.mode = "500"
    add_goal(cli, claude_env, "k1", "claude", tmp_path / "work")
    report = run_once(cli, "k1", claude_env)
    assert (report["status"], report["kind"]) == ("committed", "wait"), report
    assert report["result"]["evidence"] == ["host_server_error"]
    assert "API Error: 500" in report["result"]["summary"]


def test_unreachable_server_is_a_wait(cli, claude_env, mock, tmp_path):
    """`API Error: Unable to connect to API (ConnectionRefused)` commits a host_unreachable wait."""
    mock.unreachable()
    add_goal(cli, claude_env, "k1", "claude", tmp_path / "work")
    report = run_once(cli, "k1", claude_env)
    assert (report["status"], report["kind"]) == ("committed", "wait"), report
    assert report["result"]["evidence"] == ["host_unreachable"]


def test_hanging_server_ends_in_turn_timeout(cli, claude_env, mock, tmp_path):
    """A server that never answers: the turn is killed at its timeout, typed turn_timeout."""
    mock.model.mode = "hang"
    add_goal(cli, claude_env, "k1", "claude", tmp_path / "work", "--turn-timeout", "8")
    report = run_once(cli, "k1", claude_env)
    assert (report["status"], report["failure"]["reason"]) == ("failed", "turn_timeout")


def test_lost_session_drops_it(cli, claude_env, mock, tmp_path):
    """Claude Code cannot find the session: a typed failure, and the next turn starts fresh."""
    add_goal(cli, claude_env, "k1", "claude", tmp_path / "work")
    run_once(cli, "k1", claude_env)
    shutil.rmtree(Path(claude_env["CLAUDE_CONFIG_DIR"]) / "projects")
    lost = run_once(cli, "k1", claude_env)
    assert lost["failure"]["reason"] == "host_execution_error", lost
    assert goal_state(cli, "k1")["host_session"]["session_id"] == ""


def test_done_check_decides_completed(cli, claude_env, mock, tmp_path):
    """A false `completed` is progress under --done-check; Claude's next prompt shows the output."""
    false_then_true_completed(
        cli, claude_env, mock, tmp_path, kind="claude", requests="/v1/messages"
    )
