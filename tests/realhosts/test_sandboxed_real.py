"""The real Codex and Claude Code, sandboxed with every permission, reach done through the proxy.

Each goal runs on an API-key account whose key is in its env file only: the
CLI inside the sandbox holds a placeholder, its base URL points at the
bridge, and the proxy adds the key on the way to the mock. The model's tool
call runs ``env`` inside the sandbox; what it printed goes back to the mock,
which shows the placeholder and never the key.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.realhosts.conftest import base_env, require_cli, run_once
from tests.realhosts.mockmodel import MockServer

pytestmark = [
    pytest.mark.realhosts,
    pytest.mark.timeout(90),
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed"),
]

KEY = "sk-real-sandbox-key-5f1e"  # the account's key: never inside the sandbox
DONE = json.dumps({"kind": "completed", "summary": "done"})
PROGRESS = json.dumps({"kind": "progress", "summary": "looked", "next_action": "finish"})


def _account(cli: Any, tmp_path: Path, kind: str, key_var: str, *settings: str) -> None:
    env_file = tmp_path / f"{kind}.env"
    env_file.write_text(f"{key_var}={KEY}\n")
    env_file.chmod(0o600)
    flags = [f for s in settings for f in ("--env", s)]
    cli.run(
        "account", "add", "acct", "--host-kind", kind, "--env-file", str(env_file), *flags,
        check=True,
    )  # fmt: skip


def _goal(cli: Any, env: dict[str, str], kind: str, work: Path) -> None:
    work.mkdir(exist_ok=True)
    cli.run(
        "goal", "add", "g", "--objective", "list the files", "--workdir", str(work),
        "--host-kind", kind, "--account", "acct", "--sandbox", "bwrap", "--autonomy", "full",
        check=True, **env,
    )  # fmt: skip


def _two_turns(cli: Any, env: dict[str, str], mock: MockServer) -> list[dict[str, Any]]:
    """A tool call and progress, then done: the goal's two turns."""
    mock.model.mode, mock.model.command, mock.model.answer = "tool", "env", PROGRESS
    first = run_once(cli, "g", env)
    mock.model.mode, mock.model.answer = "ok", DONE
    second = run_once(cli, "g", env)
    return [first, second]


def _assert_key_stayed_outside(cli: Any, mock: MockServer, path: str, header: str) -> None:
    requests = mock.model.model_requests(path)
    assert requests
    sent = [v for r in requests for k, v in r.headers.items() if k.lower() == header]
    assert sent and all(KEY in value for value in sent), sent  # the proxy added it
    bodies = json.dumps([r.body for r in requests])
    assert "loopx-sandbox-placeholder-" in bodies  # `env` inside showed the placeholder...
    assert KEY not in bodies  # ...and never the key
    assert cli.json("goal", "show", "g")["goal"]["status"] == "done"


def test_codex_sandboxed_with_full_autonomy_reaches_done(cli, mock, tmp_path):
    """Codex through the proxy: two turns, done; the key only outside."""
    require_cli("codex")
    env = base_env(tmp_path)
    _account(cli, tmp_path, "codex", "OPENAI_API_KEY", f"LOOPX_PROVIDER_URL={mock.url}/v1")
    codex_home = Path(cli.json("account", "show", "acct")["summary"]["config_dir"])
    # Codex 0.171 ignores OPENAI_BASE_URL: a provider in the account's own CODEX_HOME names the
    # bridge inside every sandbox, and LOOPX_PROVIDER_URL the real endpoint the proxy forwards to.
    (codex_home / "config.toml").write_text(
        'model = "mock-model"\n'
        'model_provider = "mock"\n'
        "[model_providers.mock]\n"
        'name = "mock"\n'
        'base_url = "http://127.0.0.1:3128"\n'
        'wire_api = "responses"\n'
        'env_key = "OPENAI_API_KEY"\n'
        "request_max_retries = 0\n"
        "stream_max_retries = 0\n"
    )
    _goal(cli, env, "codex", tmp_path / "work")
    first, second = _two_turns(cli, env, mock)
    assert (first["status"], second["status"], second["kind"]) == (
        "committed",
        "committed",
        "completed",
    ), (first, second)
    _assert_key_stayed_outside(cli, mock, "/v1/responses", "authorization")


def test_claude_sandboxed_with_full_autonomy_reaches_done(cli, mock, tmp_path):
    """Claude Code through the proxy: two turns, done; the key only outside."""
    require_cli("claude")
    env = base_env(tmp_path)
    _account(
        cli, tmp_path, "claude", "ANTHROPIC_API_KEY", f"ANTHROPIC_BASE_URL={mock.url}",
        "CLAUDE_CODE_MAX_RETRIES=0", "DISABLE_TELEMETRY=1", "DISABLE_AUTOUPDATER=1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
    )  # fmt: skip
    _goal(cli, env, "claude", tmp_path / "work")
    first, second = _two_turns(cli, env, mock)
    assert (first["status"], second["status"], second["kind"]) == (
        "committed",
        "committed",
        "completed",
    ), (first, second)
    _assert_key_stayed_outside(cli, mock, "/v1/messages", "x-api-key")
