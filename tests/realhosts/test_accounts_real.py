"""A usage limit at minute resolution parks the account, with the real Codex and Claude CLIs.

The accounts' acceptance case: 3 goals on one account and 2 agents against the loopback
mock, which answers a usage limit resetting 2 minutes ahead (and then answers
normally): exactly one turn meets the limit, no other goal of the account
starts a turn before the reset, every goal resumes within 90 s after it, and
no wait ends more than 90 s after it. The budget: one limited turn and three
more per CLI, each goal then waiting 10 minutes (the fleet goes idle).
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from loopx.secrets import is_secret_name
from tests.fleet_helpers import journals, kill_everything, start_supervisor, wait_for
from tests.realhosts.conftest import add_goal
from tests.realhosts.mockmodel import MockServer

pytestmark = [pytest.mark.realhosts, pytest.mark.timeout(420)]

GOALS = ("r1", "r2", "r3")
RESUME_WITHIN = timedelta(seconds=90)
IDLE = json.dumps({"kind": "wait", "wait_seconds": 600, "summary": "done for now"})


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text)


def _limited(journal: dict[str, Any]) -> bool:
    return "host_rate_limited" in ((journal.get("result") or {}).get("evidence") or [])


@pytest.mark.parametrize("kind", ["codex", "claude"])
def test_a_limit_two_minutes_ahead_parks_the_account_and_every_goal_resumes(
    kind: str, request: pytest.FixtureRequest, cli: Any, mock: MockServer, tmp_path: Path
) -> None:
    """One turn meets the limit; the other goals wait for the reset; all resume within 90 s."""
    full = request.getfixturevalue(f"{kind}_env")
    # The credentials go in the account's env file; the supervisor's environment has none.
    secrets = {k: v for k, v in full.items() if is_secret_name(k)}
    env = {k: v for k, v in full.items() if k not in secrets}
    env_file = tmp_path / "sub.env"
    env_file.write_text("".join(f"{k}={v}\n" for k, v in secrets.items()))
    env_file.chmod(0o600)
    cli.run("account", "add", "sub", "--host-kind", kind, "--env-file", str(env_file),
            check=True, **env)  # fmt: skip
    if kind == "codex":  # the account's own CODEX_HOME holds the provider pointing at the mock
        home = Path(cli.json("account", "show", "sub", **env)["summary"]["config_dir"])
        (home / "config.toml").write_text((Path(env["CODEX_HOME"]) / "config.toml").read_text())
    for goal_id in GOALS:
        add_goal(cli, env, goal_id, kind, tmp_path / f"w-{goal_id}", "--account", "sub")
    mock.model.answer = IDLE
    mock.model.mode = "usage_limit"
    mock.model.reset_at = int(time.time()) + 120
    reset = datetime.fromtimestamp(mock.model.reset_at, UTC)
    proc = start_supervisor(cli.root, "--agents", "2", log=tmp_path / "supervisor.log", **env)
    try:
        state = wait_for(
            "the account to be parked",
            lambda: (s := _state(cli.root)) and s["condition"] == "limited" and s,
            timeout=120,
        )
        until = _at(state["until"])
        assert reset <= until <= reset + RESUME_WITHIN, (reset, until)

        def resumed() -> bool:
            return all(
                any(j["status"] == "committed" and not _limited(j)
                    for j in journals(cli.root, g))
                for g in GOALS
            )  # fmt: skip

        wait_for("every goal to resume", resumed, timeout=300, every=1.0)
    finally:
        kill_everything(cli.root, proc)
    turns = [j for g in GOALS for j in journals(cli.root, g)]
    limited = [j for j in turns if _limited(j)]
    assert len(limited) == 1, [(j["goal_id"], j["turn_key"]) for j in limited]
    hit_end = _at(limited[0]["ended_at"])
    early = [j["turn_key"] for j in turns if hit_end < _at(j["created_at"]) < until]
    assert early == []
    for goal_id in GOALS:
        first = min(_at(j["created_at"]) for j in journals(cli.root, goal_id) if not _limited(j))
        assert first - reset <= RESUME_WITHIN, (goal_id, reset, first)
    leaked = [
        str(p) for p in cli.root.rglob("*") if p.is_file()
        for v in secrets.values() if len(v) >= 6 and v.encode() in p.read_bytes()
    ]  # fmt: skip
    assert leaked == []


def _state(root: Path) -> dict[str, Any] | None:
    try:
        return json.loads((root / "accounts" / "sub" / "state.json").read_text())
    except (FileNotFoundError, ValueError):
        return None
