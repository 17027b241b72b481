"""What an auth failure and a spent budget do to an account, end to end with the fake CLIs.

An auth failure does not wait for agent retries; it gates
the account at once and the gate carries the CLI's advice. A budget
breach opens one gate on the account, no goal fails, and answering it lets the
goals go on; the overload gate's N is the one the turn's journal recorded.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from loopx.root import Layout
from loopx.testing import install_fake_host
from loopx.turn.accounting import apply_turn
from loopx.turn.journal import journal_files, read_journal
from tests.fleet_helpers import cli

pytestmark = pytest.mark.timeout(180)


def _root(tmp_path: Path, kind: str) -> tuple[Path, dict[str, str]]:
    root = tmp_path / "root"
    bin_dir = tmp_path / "bin"
    install_fake_host(bin_dir, kind)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", f"FAKE_{kind.upper()}_HOME": str(tmp_path / "h")}
    assert cli(root, "init", **env).returncode == 0
    return root, env


def _goal(root: Path, tmp_path: Path, goal_id: str, kind: str, env: dict[str, str], *flags: str):
    work = tmp_path / f"w-{goal_id}"
    work.mkdir()
    done = cli(root, "goal", "add", goal_id, "--objective", "x", "--workdir", str(work),
               "--host-kind", kind, *flags, **env)  # fmt: skip
    assert done.returncode == 0, done.stderr


def _run(root: Path, goal_id: str, env: dict[str, str]) -> dict[str, Any]:
    return json.loads(cli(root, "turn", "run-once", goal_id, "--json", **env).stdout)


def _status(root: Path, env: dict[str, str]) -> dict[str, Any]:
    return json.loads(cli(root, "status", "--json", "--ttl", "0", **env).stdout)


def test_an_auth_failure_gates_the_account_at_once_with_the_login_advice(tmp_path: Path):
    """One auth failure: the account asks a human with Claude Code's /login advice; no retries."""
    root, env = _root(tmp_path, "claude")
    for goal_id in ("c1", "c2"):
        _goal(root, tmp_path, goal_id, "claude", env)
    failed = _run(root, "c1", {**env, "FAKE_CLAUDE_MODE": "auth"})
    assert failed["report"]["failure"]["reason"] == "host_auth"
    # The goal did not fail: no streak, no backoff of its own; the account holds it.
    state = json.loads((root / "goals" / "c1" / "state.json").read_text())
    assert (state["consecutive_failures"], state["next_eligible_at"]) == (0, None)
    held = _run(root, "c2", env)
    assert held["report"] is None
    assert held["quota"]["reason"] == "account_waiting"
    status = _status(root, env)
    views = {v["goal_id"]: v for v in status["goals"]}
    for goal_id in ("c1", "c2"):
        assert (views[goal_id]["actor"], views[goal_id]["reason"]) == ("human", "waiting")
        assert "account default-claude: login refused" in views[goal_id]["explanation"]
        assert "/login" in views[goal_id]["explanation"]
    (account,) = [a for a in status["accounts"] if a["name"] == "default-claude"]
    assert account["state"] == "login_refused"
    assert "/login" in account["question"]
    # A human logged in and said so: the next turn goes first as a probe and runs.
    resolved = cli(root, "account", "resolve", "default-claude", "--answer", "logged in", **env)
    assert resolved.returncode == 0, resolved.stderr
    assert _run(root, "c2", env)["report"]["status"] == "committed"


def test_a_budget_breach_opens_one_gate_no_goal_fails_and_raising_it_goes_on(tmp_path: Path):
    """Tokens past the account's cap: one gate with the numbers, answered by `raise N`."""
    root, env = _root(tmp_path, "codex")
    env["FAKE_CODEX_TOKENS"] = "1000,200"
    added = cli(root, "account", "add", "plan", "--host-kind", "codex", "--max-tokens", "2000",
                "--price-in-per-mtok", "2", "--price-out-per-mtok", "8", **env)  # fmt: skip
    assert added.returncode == 0, added.stderr
    for goal_id in ("p1", "p2"):
        _goal(root, tmp_path, goal_id, "codex", env, "--account", "plan")
    assert _run(root, "p1", env)["report"]["status"] == "committed"  # 1,200 tokens
    assert _run(root, "p2", env)["report"]["status"] == "committed"  # 2,400: over the cap
    for goal_id in ("p1", "p2"):
        held = _run(root, goal_id, env)
        assert held["report"] is None
        assert held["quota"]["reason"] == "account_waiting"
    shown = json.loads(cli(root, "account", "show", "plan", "--json", **env).stdout)["summary"]
    assert shown["state"] == "budget_spent"
    assert shown["question"].startswith(
        "account plan spent 2,400 of 2,000 tokens in 24 h; answer `raise 4000`, or wait until "
    )
    assert shown["spend"]["tokens"] == 2400
    assert shown["cost_estimated"] is True  # codex reports tokens, no cost: from the prices
    assert shown["spend"]["cost_usd"] == pytest.approx(2 * (1000 * 2 + 200 * 8) / 1e6)
    for goal_id in ("p1", "p2"):
        state = json.loads((root / "goals" / goal_id / "state.json").read_text())
        assert state["consecutive_failures"] == 0
    low = cli(root, "account", "resolve", "plan", "--answer", "raise 100", **env)
    assert low.returncode != 0
    assert "raise N" in low.stderr
    raised = cli(root, "account", "resolve", "plan", "--answer", "raise 10000", **env)
    assert raised.returncode == 0, raised.stderr
    assert _run(root, "p1", env)["report"]["status"] == "committed"
    account = json.loads((root / "accounts" / "plan" / "account.json").read_text())
    assert account["budget"]["max_tokens"] == 10000


def test_on_limit_stop_pauses_the_goal_that_met_the_limit(tmp_path: Path):
    """--on-limit stop on the goal: the limit pauses it instead of waiting for the reset."""
    root, env = _root(tmp_path, "codex")
    _goal(root, tmp_path, "s1", "codex", env, "--on-limit", "stop")
    ran = _run(root, "s1", {**env, "FAKE_CODEX_MODE": "rate_limit"})
    assert ran["report"]["status"] == "committed"
    goal = json.loads((root / "goals" / "s1" / "goal.json").read_text())
    assert goal["status"] == "paused"


def test_the_overload_gate_is_decided_by_the_n_its_journal_recorded(tmp_path: Path):
    """Replaying an overload after `account edit --max-overloads` gives the same gate."""
    root, env = _root(tmp_path, "claude")
    added = cli(root, "account", "add", "plan", "--host-kind", "claude", "--max-overloads", "1",
                **env)  # fmt: skip
    assert added.returncode == 0, added.stderr
    _goal(root, tmp_path, "o1", "claude", env, "--account", "plan")
    assert _run(root, "o1", {**env, "FAKE_CLAUDE_MODE": "server_error"})["report"] is not None
    state_file = root / "accounts" / "plan" / "state.json"
    before = json.loads(state_file.read_text())
    assert (before["condition"], before["overloads"], before["max_overloads"]) == (
        "needs_human", 1, 1)  # fmt: skip
    layout = Layout.at(root)
    (path,) = journal_files(layout, "o1")
    journal = read_journal(path)
    assert journal.plan.max_overloads == 1
    # Someone raises N afterwards; the account's record is replayed from the journal alone.
    edited = cli(root, "account", "edit", "plan", "--max-overloads", "5", **env)
    assert edited.returncode == 0, edited.stderr
    state_file.unlink()
    apply_turn(layout, journal)
    after = json.loads(state_file.read_text())
    assert {k: v for k, v in after.items() if k != "updated_at"} == {
        k: v for k, v in before.items() if k != "updated_at"
    }


def test_a_429_without_a_reset_parks_the_account_a_minute_not_half_an_hour(tmp_path: Path):
    """A bare 429: the account is rate limited for 60 s (not 30 min), shown as such, durably."""
    root, env = _root(tmp_path, "claude")
    for goal_id in ("r1", "r2"):
        _goal(root, tmp_path, goal_id, "claude", env)
    hit = _run(root, "r1", {**env, "FAKE_CLAUDE_MODE": "rate_limit_429"})
    assert hit["report"]["status"] == "committed"
    journal = json.loads(next((root / "goals" / "r1" / "turns").glob("*.json")).read_text())
    ended = datetime.fromisoformat(journal["updated_at"])
    state = json.loads((root / "accounts" / "default-claude" / "state.json").read_text())
    assert (state["condition"], state["reset_unknown"], state["limit_hits"]) == ("limited", True, 1)
    until = datetime.fromisoformat(state["until"])
    assert timedelta(seconds=55) <= until - ended <= timedelta(seconds=65)
    # The goal that met it looks again after the same minute, not after the old 30 minutes.
    goal_state = json.loads((root / "goals" / "r1" / "state.json").read_text())
    assert datetime.fromisoformat(goal_state["next_eligible_at"]) - ended <= timedelta(seconds=65)
    held = _run(root, "r2", env)
    assert (held["report"], held["quota"]["reason"]) == (None, "account_waiting")
    assert held["quota"]["message"].startswith("account default-claude rate limited, retry at ")
    views = {v["goal_id"]: v for v in _status(root, env)["goals"]}
    assert "rate limited, retry at" in views["r2"]["explanation"]
    (account,) = [a for a in _status(root, env)["accounts"] if a["name"] == "default-claude"]
    assert (account["state"], account["waiting"]) == ("limited", ["r1", "r2"])
