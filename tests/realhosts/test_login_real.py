"""A revoked login parks its account, with the real Codex and Claude CLIs.

The account ``sub`` keeps its CLI's configuration in its own directory under the
root (Codex's provider in ``config.toml`` there, Claude Code's state there over the
supervisor's ``CLAUDE_CONFIG_DIR``). The loopback mock answers every call with a 401
for a revoked token: the account's probe turn meets it, the account is parked
``login_refused`` with one notification (``auth:account:sub``), no goal fails and
no other goal of the account starts a turn. Once the mock answers again,
`loopx account check` gets through and reopens the account, and both goals run.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loopx.secrets import is_secret_name
from tests.fleet_helpers import journals, kill_everything, start_supervisor, wait_for
from tests.realhosts.conftest import add_goal
from tests.realhosts.mockmodel import MockServer
from tests.test_notify_delivery import Receiver

pytestmark = [pytest.mark.realhosts, pytest.mark.timeout(90)]

GOALS = ("a1", "a2")
IDLE = json.dumps({"kind": "wait", "wait_seconds": 600, "summary": "done for now"})
FAST = ("--refresh-interval-seconds", "0.2", "--status-projection-cache-ttl-seconds", "0")


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


def _account(
    cli: Any, env: dict[str, str], kind: str, tmp_path: Path, full: dict[str, str]
) -> Path:
    """Account ``sub`` with the credentials in its env file; its own CLI directory, returned."""
    secrets = {k: v for k, v in full.items() if is_secret_name(k)}
    env_file = tmp_path / "sub.env"
    env_file.write_text("".join(f"{k}={v}\n" for k, v in secrets.items()))
    env_file.chmod(0o600)
    cli.run("account", "add", "sub", "--host-kind", kind, "--env-file", str(env_file),
            check=True, **env)  # fmt: skip
    home = Path(cli.json("account", "show", "sub", **env)["summary"]["config_dir"])
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    if kind == "codex":  # the provider pointing at the mock lives in the account's CODEX_HOME
        config = Path(full["CODEX_HOME"]) / "config.toml"
        (home / "config.toml").write_text(config.read_text())
    return home


def _auth_posts(receiver: Receiver) -> list[str]:
    with receiver.lock:
        return [k for k, n in receiver.posts.items() for _ in range(n) if k.startswith("auth:")]


@pytest.mark.parametrize("kind", ["codex", "claude"])
def test_a_revoked_login_parks_the_account_with_one_notification_and_no_goal_failure(
    kind: str,
    request: pytest.FixtureRequest,
    cli: Any,
    *,
    mock: MockServer,
    receiver: Receiver,
    tmp_path: Path,
) -> None:
    """The probe meets the 401; the account is login_refused, told once; no goal fails."""
    full = request.getfixturevalue(f"{kind}_env")
    env = {k: v for k, v in full.items() if not is_secret_name(k) and k != "CODEX_HOME"}
    home = _account(cli, env, kind, tmp_path, full)
    cli.run("notify", "add", receiver.url, check=True, **env)
    for goal_id in GOALS:
        add_goal(cli, env, goal_id, kind, tmp_path / f"w-{goal_id}", "--account", "sub")
    mock.model.answer = IDLE
    mock.model.mode = "revoked"
    proc = start_supervisor(cli.root, "--agents", "2", *FAST, log=tmp_path / "sup.log", **env)
    try:
        wait_for("one auth notification", lambda: _auth_posts(receiver), timeout=60, every=0.2)
        state = _state(cli.root)
        assert (state["condition"], state["gate"] is not None) == ("login_refused", True), state
        assert "loopx account login sub" in state["gate"]["question"]
        mock.model.mode = "ok"
        passed = cli.run("account", "check", "sub", "--json", timeout=60, **env)
        assert passed.returncode == 0, passed.stdout + passed.stderr
        assert json.loads(passed.stdout)["state"] == "ok"

        def both_ran() -> bool:
            return all(
                any(j["status"] == "committed" for j in journals(cli.root, g)) for g in GOALS
            )

        wait_for("both goals to run after the check", both_ran, timeout=60, every=0.2)
    finally:
        kill_everything(cli.root, proc)
    turns = [j for g in GOALS for j in journals(cli.root, g)]
    auth = [j for j in turns if (j.get("failure") or {}).get("reason") == "host_auth"]
    assert len(auth) == 1, [(j["goal_id"], j["status"]) for j in turns]
    assert [k.split("@")[0] for k in _auth_posts(receiver)] == ["auth:account:sub"]
    with receiver.lock:
        assert not [k for k in receiver.posts if k.startswith("failing:")]
    for goal_id in GOALS:
        state = json.loads((cli.root / "goals" / goal_id / "state.json").read_text())
        assert state["consecutive_failures"] == 0, (goal_id, state)
    assert mock.model.model_requests("/v1/responses" if kind == "codex" else "/v1/messages")
    if kind == "claude":  # Claude Code kept its state in the account's directory
        assert any(home.iterdir()), sorted(os.listdir(home))


def _state(root: Path) -> dict[str, Any]:
    return json.loads((root / "accounts" / "sub" / "state.json").read_text())


def _own_settings(kind: str, home: Path, full: dict[str, str]) -> None:
    """The CLI's settings for the mock, in the account's own directory."""
    if kind == "gemini":
        settings = Path(full["GEMINI_CLI_HOME"]) / ".gemini" / "settings.json"
        (home / ".gemini").mkdir()
        (home / ".gemini" / "settings.json").write_text(settings.read_text())


@pytest.mark.parametrize("kind", ["codex", "claude", "gemini"])
def test_check_goes_through_the_cli_in_the_accounts_own_directory(
    kind: str, request: pytest.FixtureRequest, cli: Any, mock: MockServer, tmp_path: Path
) -> None:
    """A revoked token: `account check` exits 4, ``auth``, parked; answered: 0, reopened."""
    full = request.getfixturevalue(f"{kind}_env")
    own = {"CODEX_HOME", "GEMINI_CLI_HOME"}
    env = {k: v for k, v in full.items() if not is_secret_name(k) and k not in own}
    home = _account(cli, env, kind, tmp_path, full)
    _own_settings(kind, home, full)
    mock.model.mode = "revoked"
    refused = cli.run("account", "check", "sub", "--json", timeout=60, **env)
    assert refused.returncode == 4, refused.stdout + refused.stderr
    found = json.loads(refused.stdout)
    assert (found["outcome"], found["state"]) == ("auth", "login_refused"), found
    mock.model.mode = "ok"
    passed = cli.run("account", "check", "sub", "--json", timeout=60, **env)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert json.loads(passed.stdout)["state"] == "ok"
    assert len(mock.model.requests) >= 2  # both calls reached the mock: the account's settings
