"""A usage limit parks its account: a fleet of 2 agents, the fake codex CLI.

Three goals on account ``plan`` (whose provider limit the fake reads from a
file its environment names) and one on account ``other``: exactly one turn
meets the limit, no other goal of ``plan`` starts before the reset, ``other``
runs on, and every goal of ``plan`` resumes within 90 s after the reset. The
same fleet with a budget on ``plan``: its breach opens one gate (the
account's), no goal fails, ``other`` runs on, and `raise N` lets them go on.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from loopx.testing import install_fake_host
from tests.fleet_helpers import cli, journals, kill_everything, start_supervisor, wait_for

pytestmark = pytest.mark.timeout(300)

SECRET = "sk-fake-account-secret-0123456789"
PLAN = ("a1", "a2", "a3")
RESULT = json.dumps({"kind": "wait", "wait_seconds": 3, "summary": "fake codex turn"})


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text)


def _limited(journal: dict[str, Any]) -> bool:
    result = journal.get("result") or {}
    return "host_rate_limited" in (result.get("evidence") or [])


def _setup(root: Path, tmp_path: Path) -> tuple[dict[str, str], Path]:
    bin_dir = tmp_path / "bin"
    install_fake_host(bin_dir, "codex")
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "FAKE_CODEX_HOME": str(tmp_path / "codex-home"),
        "FAKE_CODEX_RESULT": RESULT,
        "TZ": "UTC",
    }
    assert cli(root, "init", **env).returncode == 0
    secrets = tmp_path / "plan.env"
    secrets.write_text(f"OPENAI_API_KEY={SECRET}\n")
    secrets.chmod(0o600)
    limit = tmp_path / "plan-limit"
    added = cli(root, "account", "add", "plan", "--host-kind", "codex", "--env-file",
                str(secrets), "--env", f"FAKE_CODEX_LIMIT_FILE={limit}", **env)  # fmt: skip
    assert added.returncode == 0, added.stderr
    assert cli(root, "account", "add", "other", "--host-kind", "codex", **env).returncode == 0
    for goal_id, account in (*((g, "plan") for g in PLAN), ("b1", "other")):
        work = tmp_path / f"w-{goal_id}"
        work.mkdir()
        done = cli(root, "goal", "add", goal_id, "--objective", f"work on {goal_id}",
                   "--workdir", str(work), "--host-kind", "codex", "--account", account, **env)  # fmt: skip
        assert done.returncode == 0, done.stderr
    return env, limit


def _reset_ahead(now: datetime) -> datetime:
    """A provider reset at second 55 of a minute at least 25 s ahead (codex prints the minute)."""
    at = (now + timedelta(seconds=25)).replace(microsecond=0)
    return at + timedelta(seconds=(55 - at.second) % 60)


# About 100 s (the 60 s minimum wait after a limit is the product's rule): run with the soaks.
@pytest.mark.soak
def test_a_limit_parks_the_account_once_and_every_goal_resumes_after_the_reset(
    root: Path, tmp_path: Path
) -> None:
    """2 agents, 3 goals of one account and 1 of another: one turn hits the limit, all resume."""
    env, limit = _setup(root, tmp_path)
    reset = _reset_ahead(datetime.now(UTC))
    limit.write_text(reset.isoformat())
    proc = start_supervisor(root, "--agents", "2", **env)
    try:
        hit = wait_for(
            "a turn of account plan to meet the limit",
            lambda: next((j for g in PLAN for j in journals(root, g) if _limited(j)), None),
            timeout=60,
        )
        state = wait_for(
            "account plan to be parked",
            lambda: (s := _state(root)) and s["condition"] == "limited" and s,
        )
        until = _at(state["until"])
        # Read to the minute, the reset is the minute's end: never before the real one.
        assert until >= reset
        assert until - reset <= timedelta(seconds=65)
        status = json.loads(cli(root, "status", "--json", **env).stdout)
        waiting = {v["goal_id"]: v for v in status["goals"] if v["goal_id"] in PLAN}
        held = [v for g, v in waiting.items() if g != hit["goal_id"]]
        assert all(v["reason"] == "waiting" for v in held), held
        assert all("account plan limited until" in v["explanation"] for v in held), held
        assert f"seen by goal {hit['goal_id']}" in held[0]["explanation"]
        accounts = {a["name"]: a for a in status["accounts"]}
        assert accounts["plan"]["state"] == "limited"
        assert set(accounts["plan"]["waiting"]) >= {v["goal_id"] for v in held}
        assert accounts["other"]["state"] == "ok"

        def resumed() -> bool:
            return all(
                any(_at(j["created_at"]) >= until and j["status"] == "committed" and not
                    _limited(j) for j in journals(root, g))
                for g in PLAN
            )  # fmt: skip

        wait_for("every goal of plan to resume after the reset", resumed, timeout=240, every=0.5)
        resumed_at = datetime.now(UTC)
    finally:
        kill_everything(root, proc)

    plan_turns = [j for g in PLAN for j in journals(root, g)]
    limited = [j for j in plan_turns if _limited(j)]
    assert [j["turn_key"] for j in limited] == [hit["turn_key"]]
    hit_end = _at(limited[0]["ended_at"])
    early = [j["turn_key"] for j in plan_turns if hit_end < _at(j["created_at"]) < until]
    assert early == []  # nobody of the account started before the reset
    firsts = [min(_at(j["created_at"]) for j in journals(root, g) if _at(j["created_at"]) >= until)
              for g in PLAN]  # fmt: skip
    assert max(firsts) - until <= timedelta(seconds=90), (until, firsts, resumed_at)
    others = [j for j in journals(root, "b1") if hit_end < _at(j["created_at"]) < until]
    assert len(others) >= 2  # the other account's goal ran on through it
    # The account's credential reached the host (the fake would not care), never a file of LoopX.
    leaked = [p for p in root.rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]
    assert leaked == []


def _state(root: Path) -> dict[str, Any] | None:
    try:
        return json.loads((root / "accounts" / "plan" / "state.json").read_text())
    except (FileNotFoundError, ValueError):
        return None


def test_the_account_environment_reaches_the_host(root: Path, tmp_path: Path) -> None:
    """A goal's host runs with its account's env file and --env applied, others without."""
    env, _limit = _setup(root, tmp_path)
    log = tmp_path / "codex.log"
    printer = tmp_path / "bin" / "codex-env"
    printer.write_text(
        '#!/bin/sh\nprintf \'%s %s\\n\' "$LOOPX_GOAL_ID" "${OPENAI_API_KEY:-none}" >> '
        f'{log}\nexec {tmp_path / "bin" / "codex"} "$@"\n'
    )
    printer.chmod(0o755)
    for goal_id in ("a1", "b1"):
        done = cli(root, "goal", "add", goal_id, "--update", "--host-kind", "codex",
                   "--host", str(printer), **env)  # fmt: skip
        assert done.returncode == 0, done.stderr
    for goal_id in ("a1", "b1"):
        ran = cli(root, "turn", "run-once", goal_id, "--json", **env)
        assert ran.returncode == 0, ran.stderr
    lines = sorted(log.read_text().split("\n")[:-1])
    assert lines == [f"a1 {SECRET}", "b1 none"]
    assert SECRET not in ran.stdout
    assert os.environ.get("OPENAI_API_KEY") != SECRET


def test_a_budget_breach_under_a_fleet_opens_one_gate_and_raising_it_lets_the_goals_go_on(
    root: Path, tmp_path: Path
) -> None:
    """2 agents, 3 goals of a budgeted account and 1 of another: one gate, no failure, `raise`."""
    env, _limit = _setup(root, tmp_path)
    edited = cli(root, "account", "edit", "plan", "--max-tokens", "2000", **env)  # 1,200 a turn
    assert edited.returncode == 0, edited.stderr
    proc = start_supervisor(root, "--agents", "2", **env)
    try:
        state = wait_for(
            "account plan's budget to be spent",
            lambda: (s := _state(root)) and s["condition"] == "budget_spent" and s,
            timeout=90,
        )
        opened = _at(state["gate"]["opened_at"])

        def after(goal_id: str, since: datetime) -> list[dict[str, Any]]:
            return [j for j in journals(root, goal_id) if _at(j["created_at"]) > since]

        wait_for(
            "the other account's goal to run on",
            lambda: any(j["status"] == "committed" for j in after("b1", opened)),
            timeout=60,
        )
        status = json.loads(cli(root, "status", "--json", **env).stdout)
        views = {v["goal_id"]: v for v in status["goals"]}
        for goal_id in PLAN:
            assert (views[goal_id]["actor"], views[goal_id]["reason"]) == ("human", "waiting")
            assert "account plan is spent: account plan spent " in views[goal_id]["explanation"]
        assert views["b1"]["actor"] != "human"
        assert "spent" not in views["b1"]["explanation"]  # its own account holds it at most briefly
        accounts = {a["name"]: a for a in status["accounts"]}
        assert accounts["plan"]["state"] == "budget_spent"
        assert accounts["other"]["state"] == "ok"
        # An admission just before the gate opened may start its turn a moment after.
        late = opened + timedelta(seconds=1)
        assert [j["turn_key"] for g in PLAN for j in after(g, late)] == []
        answered = cli(root, "account", "resolve", "plan", "--answer", "raise 100000", **env)
        assert answered.returncode == 0, answered.stderr
        raised_at = datetime.now(UTC)
        wait_for(
            "every goal of plan to go on after the raise",
            lambda: all(any(j["status"] == "committed" for j in after(g, raised_at)) for g in PLAN),
            timeout=90,
            every=0.5,
        )
    finally:
        kill_everything(root, proc)
    # One gate, the account's: no goal failed, none has a gate of its own, all still active.
    for goal_id in (*PLAN, "b1"):
        goal_state = json.loads((root / "goals" / goal_id / "state.json").read_text())
        assert (goal_state["consecutive_failures"], goal_state["gates"]) == (0, []), goal_id
        goal = json.loads((root / "goals" / goal_id / "goal.json").read_text())
        assert goal["status"] == "active", goal_id
        assert not [j for j in journals(root, goal_id) if j["status"] == "failed"], goal_id
    account = json.loads((root / "accounts" / "plan" / "account.json").read_text())
    assert account["budget"]["max_tokens"] == 100000
