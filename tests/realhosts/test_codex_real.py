"""The real Codex CLI (pinned in .ci/setup.d/realhosts.sh) driven by LoopX against a mock model."""

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


def _inputs(body: dict[str, Any] | None) -> str:
    return json.dumps((body or {}).get("input", []))


@pytest.mark.parametrize("release", releases("codex"), indirect=True)
def test_turn_commits_resumes_with_history_and_records_tokens(cli, codex_env, mock, tmp_path):
    """Two turns: both commit the model's result; the second resumes the thread with its history."""
    add_goal(cli, codex_env, "c1", "codex", tmp_path / "work")
    first = run_once(cli, "c1", codex_env)
    thread = goal_state(cli, "c1")["host_session"]["session_id"]
    mock.model.answer = json.dumps({"kind": "progress", "summary": "second", "next_action": "go"})
    second = run_once(cli, "c1", codex_env)
    assert (first["status"], first["kind"], second["status"]) == (
        "committed",
        "progress",
        "committed",
    )
    assert second["result"]["summary"] == "second"
    requests = mock.model.model_requests("/v1/responses")
    assert len(requests) == 2
    assert "mock model turn" in _inputs(
        requests[1].body
    )  # turn one's answer is in turn two's input
    assert (first["usage"]["input_tokens"], first["usage"]["output_tokens"]) == (1200, 80)
    assert second["usage"]["input_tokens"] > 0
    session = goal_state(cli, "c1")["host_session"]
    assert (session["session_id"], session["turns"]) == (thread, 2)


def test_tool_call_runs_and_the_turn_commits(cli, codex_env, mock, tmp_path):
    """The model asks for a shell command; codex runs it, sends its output back, then answers."""
    mock.model.mode = "tool"
    work = tmp_path / "work"
    # Not codex's workspace-write sandbox: with Debian's bwrap on PATH (the suites install it)
    # codex 0.171 runs the command through a helper it does not set up under a temporary
    # directory, where tmp_path puts CODEX_HOME ("bwrap: execvp codex-linux-sandbox"; docs/hosts.md).
    add_goal(cli, codex_env, "c1", "codex", work, "--host=--sandbox danger-full-access")
    (work / "marker.txt").write_text("x")
    report = run_once(cli, "c1", codex_env)
    requests = mock.model.model_requests("/v1/responses")
    assert report["status"] == "committed", report
    assert len(requests) == 2
    assert "marker.txt" in _inputs(requests[1].body)


@pytest.mark.parametrize("days", [0.1, 3])
def test_usage_limit_waits_until_the_printed_reset(cli, codex_env, mock, tmp_path, days):
    """`try again at 7:56 PM.` / `at Dec 3rd, 2026 6:56 PM.` (Berlin time): one wait until then."""
    mock.model.mode = "usage_limit"
    mock.model.reset_at = int(time.time() + days * 86400)
    add_goal(cli, codex_env, "c1", "codex", tmp_path / "work")
    report = run_once(cli, "c1", codex_env)
    assert (report["status"], report["kind"]) == ("committed", "wait"), report
    assert report["result"]["evidence"] == ["host_rate_limited"]
    # counted from the turn's start to the minute codex printed (in the host's zone, Berlin)
    assert abs(report["result"]["wait_seconds"] - days * 86400) < 180, report["result"]


def test_rate_limit_429_is_a_wait(cli, codex_env, mock, tmp_path):
    """A plain 429 is a rate limit: a committed wait, not a failure."""
    mock.model.mode = "429"
    add_goal(cli, codex_env, "c1", "codex", tmp_path / "work")
    report = run_once(cli, "c1", codex_env)
    # No reset in the message: the minimum wait, and the account backs off.
    assert (report["kind"], report["result"]["evidence"]) == (
        "wait",
        ["host_rate_limited", "rate_limit_reset_unknown"],
    )
    assert report["result"]["wait_seconds"] == 60


def test_server_error_is_a_bounded_wait(cli, codex_env, mock, tmp_path):
    """HTTP 500 ("experiencing high demand") commits a host_server_error wait of 5 minutes."""
    mock.model.mode = "500"
    add_goal(cli, codex_env, "c1", "codex", tmp_path / "work")
    report = run_once(cli, "c1", codex_env)
    assert (report["status"], report["kind"]) == ("committed", "wait"), report
    assert report["result"]["evidence"] == ["host_server_error"]
    assert report["result"]["wait_seconds"] == 300


def test_unreachable_server_is_a_wait_within_the_bound(cli, codex_env, mock, tmp_path):
    """Codex loops `Reconnecting... waiting for network`; LoopX stops it and commits a wait."""
    mock.unreachable()
    add_goal(cli, codex_env, "c1", "codex", tmp_path / "work", "--unreachable-after", "3",
             "--turn-timeout", "200")  # fmt: skip
    report = run_once(cli, "c1", codex_env)
    assert (report["status"], report["kind"]) == ("committed", "wait"), report
    assert report["result"]["evidence"] == ["host_unreachable"]
    assert report["usage"]["wall_s"] < 60


def test_hanging_server_ends_in_turn_timeout(cli, codex_env, mock, tmp_path):
    """A server that never answers: the turn is killed at its timeout, typed turn_timeout."""
    mock.model.mode = "hang"
    add_goal(cli, codex_env, "c1", "codex", tmp_path / "work", "--turn-timeout", "6")
    report = run_once(cli, "c1", codex_env)
    assert (report["status"], report["failure"]["reason"]) == ("failed", "turn_timeout")


def test_lost_thread_is_one_line_and_the_next_turn_starts_fresh(cli, codex_env, mock, tmp_path):
    """Codex cannot find the thread: the failure says so in one line and the session is dropped."""
    add_goal(cli, codex_env, "c1", "codex", tmp_path / "work")
    run_once(cli, "c1", codex_env)
    shutil.rmtree(Path(codex_env["CODEX_HOME"]) / "sessions")
    lost = run_once(cli, "c1", codex_env)
    assert lost["failure"]["reason"] == "host_execution_error"
    assert "no rollout found" in lost["failure"]["message"]
    assert "WARNING" not in lost["failure"]["message"]
    assert goal_state(cli, "c1")["host_session"]["session_id"] == ""


def test_done_check_decides_completed(cli, codex_env, mock, tmp_path):
    """A false `completed` is progress under --done-check; codex's next prompt shows the output."""
    false_then_true_completed(
        cli, codex_env, mock, tmp_path, kind="codex", requests="/v1/responses"
    )
