"""Real Claude Code whose model stream stops mid-answer: rung 1 of the stall ladder resumes it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.realhosts.conftest import add_goal, goal_state, run_once

pytestmark = [pytest.mark.realhosts, pytest.mark.timeout(90)]


def _messages(body: dict[str, Any] | None) -> str:
    return json.dumps((body or {}).get("messages", []))


def test_a_stream_that_stops_is_resumed_in_its_session(cli, claude_env, mock, tmp_path):
    """The first answer stops after two events; the session is resumed with "continue"; commits."""
    mock.model.mode = "stall_once"
    add_goal(cli, claude_env, "k1", "claude", tmp_path / "work", "--stall-timeout", "5")
    report = run_once(cli, "k1", claude_env)
    assert (report["status"], report["kind"]) == ("committed", "progress"), report
    assert mock.model.stalled
    requests = mock.model.model_requests("/v1/messages")
    resumed = [r for r in requests if "Continue where you left off" in _messages(r.body)]
    assert resumed, [_messages(r.body)[:200] for r in requests]
    assert "LoopX" in _messages(resumed[-1].body)  # the stalled session's history came along
    turns = cli.root / "goals" / "k1" / "turns"
    (journal,) = [json.loads(p.read_text()) for p in turns.glob("*.json")]
    assert [r["rung"] for r in journal["stall"]["runs"]] == ["resume"]
    assert goal_state(cli, "k1")["consecutive_failures"] == 0
