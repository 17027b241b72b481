"""Admission before the wall, with the real Codex and Claude CLIs: no turn starts past the mark.

The mock reports the 5-hour window at 80%, 90%, then 96% in each provider's
rate-limit headers, one answer per turn. Codex records them in its session
file; Claude Code (with stream-json output) prints a ``rate_limit_event`` from
its 90% warning on. LoopX reads them after each turn: past 95% (the default
mark) no new turn of the account starts, and both of its goals say why.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.realhosts.conftest import add_goal, run_once
from tests.realhosts.mockmodel import MockServer

pytestmark = [pytest.mark.realhosts, pytest.mark.timeout(90)]


def _journals(root: Path, goal_id: str) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in (root / "goals" / goal_id / "turns").glob("*.json")]


# What each CLI reports: Codex both windows, Claude Code the window past its warning threshold.
CASES = {
    "codex": ((), {"5-hour": (96.0, True), "weekly": (40.0, False)}),
    "claude": (("--host=--output-format stream-json --verbose",), {"5-hour": (96.0, True)}),
}


@pytest.mark.parametrize("kind", sorted(CASES))
def test_past_the_mark_no_new_turn_starts_and_the_goals_say_why(
    kind: str, request: pytest.FixtureRequest, cli: Any, mock: MockServer, tmp_path: Path
) -> None:
    """After the turn that reports 96%, neither goal of the account starts a turn until the reset."""
    env = request.getfixturevalue(f"{kind}_env")
    flags, expected_bars = CASES[kind]
    mock.model.utilization = [80.0, 90.0, 96.0]
    mock.model.window_reset_at = int(time.time()) + 2 * 3600
    for goal_id in ("a1", "a2"):
        add_goal(cli, env, goal_id, kind, tmp_path / f"w-{goal_id}", *flags)
    reports = [run_once(cli, goal_id, env) for goal_id in ("a1", "a2", "a1")]
    assert [r["status"] for r in reports] == ["committed"] * 3

    runs = [cli.run("turn", "run-once", g, "--json", **env) for g in ("a2", "a1")]
    assert [p.returncode for p in runs] == [3, 3]  # NOT_ALLOWED: the goal may not run now
    refused = [json.loads(p.stdout) for p in runs]
    status = {v["goal_id"]: v for v in cli.json("status", **env)["goals"]}
    shown = cli.json("account", "show", f"default-{kind}", **env)["summary"]

    assert [r["report"] for r in refused] == [None, None]
    assert [r["quota"]["reason"] for r in refused] == ["account_waiting"] * 2
    reset = datetime.fromtimestamp(mock.model.window_reset_at, UTC)
    why = f"account default-{kind}: 5-hour window at 96%, resets {reset:%H:%M} UTC"
    assert [(status[g]["reason"], status[g]["explanation"]) for g in ("a1", "a2")] == [
        ("waiting", why),
        ("waiting", why),
    ]
    bars = {w["label"]: (w["used_percent"], w["past_mark"]) for w in shown["windows"]}
    assert bars == expected_bars
    # The mock's record: three answers, the last at 96%; no turn began after it.
    (last_at, last_used), n = mock.model.answered_at[-1], len(mock.model.answered_at)
    assert (n, last_used) == (3, 96.0)
    started = sorted(
        datetime.fromisoformat(j["created_at"])
        for g in ("a1", "a2")
        for j in _journals(cli.root, g)
    )
    assert len(started) == 3
    assert started[-1] < datetime.fromtimestamp(last_at, UTC)
