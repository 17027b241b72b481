"""Hand-off with the real CLIs: a capped Codex account's goal goes on in Claude Code, then back.

Goal ``g`` runs on account ``work`` (the real ``codex``, against one loopback
mock) with ``spare`` (the real ``claude``, against another) as its fallback.
Its first turn teaches it a belief; the next meets Codex's usage limit; the
next runs in Claude Code, whose request carries the goal's state and the
hand-off; once ``work``'s reset is brought forward, the goal is back on
Codex, resuming its thread. Four real turns.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from loopx.accounts.accountstore import update_state
from loopx.model import utcnow
from loopx.root import ResolvedRoot, RootSource, open_root
from loopx.secrets import is_secret_name
from tests.realhosts.conftest import add_goal, base_env, goal_state, require_cli, run_once
from tests.realhosts.mockmodel import MockServer

pytestmark = [pytest.mark.realhosts, pytest.mark.timeout(150)]

BELIEF = "the parser accepts empty input"
TAUGHT = json.dumps({
    "kind": "progress", "summary": "lexer done", "next_action": "write the parser",
    "state_patch": {"beliefs": [BELIEF]},
})  # fmt: skip


OWN_DIRS = ("CODEX_HOME", "CLAUDE_CONFIG_DIR")  # an account has its own, under the root


def _account(cli: Any, env: dict[str, str], name: str, kind: str, vars_: dict[str, str]) -> None:
    """An account whose secrets are in its env file and its other settings in ``--env``; a
    codex account's own CODEX_HOME gets the config.toml pointing at the mock."""
    env_file = cli.root.parent / f"{name}.env"
    env_file.write_text("".join(f"{k}={v}\n" for k, v in vars_.items() if is_secret_name(k)))
    env_file.chmod(0o600)
    settings = [
        f"--env={k}={v}" for k, v in vars_.items() if not is_secret_name(k) and k not in OWN_DIRS
    ]
    cli.run("account", "add", name, "--host-kind", kind, "--env-file", str(env_file), *settings,
            check=True, **env)  # fmt: skip
    if "CODEX_HOME" in vars_:
        home = Path(cli.json("account", "show", name, **env)["summary"]["config_dir"])
        (home / "config.toml").write_text((Path(vars_["CODEX_HOME"]) / "config.toml").read_text())


def _last_line(root: Path) -> dict[str, Any]:
    lines = (root / "goals" / "g" / "history.jsonl").read_text().splitlines()
    return dict(json.loads(lines[-1]))


def test_a_capped_codex_goal_goes_on_in_claude_and_comes_back(
    cli: Any, mock: MockServer, codex_env: dict[str, str], tmp_path: Path
) -> None:
    """work (codex) limited: the turn runs on spare (claude) with the state; after, back on codex."""
    require_cli("claude")
    spare = MockServer()
    try:
        env = base_env(tmp_path)
        _account(cli, env, "work", "codex", {k: v for k, v in codex_env.items() if k not in env})
        _account(cli, env, "spare", "claude", {
            "ANTHROPIC_BASE_URL": spare.url,
            "CLAUDE_CODE_OAUTH_TOKEN": "sk-ant-oat01-mock",
            "CLAUDE_CODE_MAX_RETRIES": "0",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_AUTOUPDATER": "1",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        })  # fmt: skip
        add_goal(cli, env, "g", "codex", tmp_path / "w", "--account", "work",
                 "--fallback-account", "spare")  # fmt: skip
        mock.model.answer = TAUGHT
        first = run_once(cli, "g", env)
        assert first["kind"] == "progress"
        thread = goal_state(cli, "g")["host_session"]["session_id"]
        mock.model.mode = "usage_limit"
        mock.model.reset_at = int(time.time()) + 600
        limited = run_once(cli, "g", env)
        assert "host_rate_limited" in limited["result"]["evidence"]
        assert not spare.model.model_requests("/v1/messages")
        # The goal goes on at once, in Claude Code, told its state and the hand-off.
        handed = run_once(cli, "g", env)
        assert handed["status"] == "committed"
        assert (_last_line(cli.root)["account"], _last_line(cli.root)["handed_off"]) == (
            "spare",
            True,
        )
        sent = json.dumps([r.body for r in spare.model.model_requests("/v1/messages")])
        assert BELIEF in sent
        assert "write the parser" in sent
        assert "Hand-off" in sent
        # The reset (brought forward): back on codex, in the thread of its first turn.
        mock.model.mode = "ok"
        layout = open_root(
            ResolvedRoot(cli.root, cli.root / "registry.json", RootSource.FLAG), create=False
        )
        update_state(layout, "work", lambda s: s.model_copy(update={"until": utcnow()}))
        back = run_once(cli, "g", env)
        assert back["status"] == "committed"
        line = _last_line(cli.root)
        assert (line["account"], line["host_kind"], line["handed_off"]) == ("work", "codex", False)
        session = goal_state(cli, "g")["host_session"]
        assert (session["account"], session["session_id"]) == ("work", thread)  # resumed
        assert session["turns"] >= 3
    finally:
        spare.close()
