"""Fixtures of the real-CLI suite: the pinned CLIs, the loopback mock model, private CLI homes.

``release`` chooses the CLIs a test drives: ``pinned`` (PINNED, in .realhosts/) by
default; a test parametrized with ``releases(cli)`` (indirect) runs against the
newest published version too (NEWEST, in .realhosts-newest/) where it differs.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.realhosts.mockmodel import MockServer

REPO = Path(__file__).resolve().parents[2]
BIN = REPO / ".realhosts" / "node_modules" / ".bin"
NEWEST_BIN = REPO / ".realhosts-newest" / "node_modules" / ".bin"
SETUP = ".ci/setup.d/realhosts.sh"
# The CLIs installed from PyPI, each in a virtual environment of its own (.ci/setup.d/<name>.sh):
# the folder that holds the CLI alone, for PATH.
PYTHON_CLIS = {"aider": REPO / ".realhosts" / "aider" / "cli"}
PINNED = {
    "codex": "0.171.0",
    "claude": "2.1.197",
    "gemini": "0.61.0",
    "opencode": "1.18.33",
    "qwen": "0.15.10",
    "pi": "0.73.1",
    "aider": "0.86.2",
}
# The newest published versions when they were last looked up (as in SETUP); where it is the
# pinned one, or cannot run here (qwen 0.21 and later need node >= 22), only the pinned runs.
NEWEST = {"codex": "0.171.0", "claude": "2.1.332", "gemini": "0.61.0"}


def releases(cli: str) -> list[str]:
    """``pinned``, and ``newest`` when the newest published version of ``cli`` is another."""
    return ["pinned", *(["newest"] if NEWEST.get(cli, PINNED[cli]) != PINNED[cli] else [])]


def bin_of(release: str, name: str = "") -> Path:
    """Where the CLIs of ``release`` (pinned, newest) are installed (``name``'s, if from PyPI)."""
    if name in PYTHON_CLIS:
        return PYTHON_CLIS[name]
    return NEWEST_BIN if release == "newest" else BIN


@pytest.fixture
def release(request: pytest.FixtureRequest) -> str:
    """The CLIs the test drives: ``pinned`` unless parametrized (indirect) with ``newest``."""
    return str(getattr(request, "param", "pinned"))


def require_cli(name: str, release: str = "pinned") -> Path:
    """The installed CLI ``name`` of ``release``, or skip the test saying how to install it."""
    path = bin_of(release, name) / name
    if name in PYTHON_CLIS and not path.exists():
        pytest.skip(f"the real {name} CLI is not installed: run `bash .ci/setup.d/{name}.sh`")
    if not path.exists():
        pytest.skip(f"the real {name} CLI is not installed: run `bash {SETUP}` (node >= 20, npm)")
    return path


@pytest.fixture
def mock() -> Iterator[MockServer]:
    """The mock model server on 127.0.0.1, answering ``ok`` until a test switches it."""
    server = MockServer()
    try:
        yield server
    finally:
        server.close()


def base_env(tmp_path: Path, release: str = "pinned") -> dict[str, str]:
    """No credentials or config of this machine: a private HOME, the release's CLIs first on PATH."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    elsewhere = tmp_path / "elsewhere"  # never the checkout: a CLI that trusts $PWD works here
    elsewhere.mkdir(exist_ok=True)
    return {
        "HOME": str(home),
        "PWD": str(elsewhere),
        "PATH": f"{bin_of(release)}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "XDG_CONFIG_HOME": str(home / ".config"),
        "TZ": "Europe/Berlin",  # reset clocks are printed in the host's zone
        "NO_COLOR": "1",
    }


@pytest.fixture
def codex_env(tmp_path: Path, mock: MockServer, release: str) -> dict[str, str]:
    """Codex pointed at the mock through a custom provider (docs/hosts.md), retries off."""
    require_cli("codex", release)
    codex_home = tmp_path / "codex-home"
    codex_home.mkdir()
    (codex_home / "config.toml").write_text(
        'model = "mock-model"\n'
        'model_provider = "mock"\n'
        "[model_providers.mock]\n"
        'name = "mock"\n'
        f'base_url = "{mock.url}/v1"\n'
        'wire_api = "responses"\n'
        'env_key = "MOCK_API_KEY"\n'
        "request_max_retries = 0\n"
        "stream_max_retries = 0\n"
    )
    return {
        **base_env(tmp_path, release),
        "CODEX_HOME": str(codex_home),
        "MOCK_API_KEY": "sk-mock",
    }


@pytest.fixture
def claude_env(tmp_path: Path, mock: MockServer, release: str) -> dict[str, str]:
    """Claude Code pointed at the mock with ANTHROPIC_BASE_URL, as a subscriber, retries off."""
    require_cli("claude", release)
    return {
        **base_env(tmp_path, release),
        "CLAUDE_CONFIG_DIR": str(tmp_path / "claude-config"),
        "ANTHROPIC_BASE_URL": mock.url,
        # A subscriber's token: only then does Claude Code print its session/weekly limits.
        "CLAUDE_CODE_OAUTH_TOKEN": "sk-ant-oat01-mock",
        "CLAUDE_CODE_MAX_RETRIES": "0",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }


def gemini_home(tmp_path: Path, url: str) -> dict[str, str]:
    """Gemini CLI's environment: API-key auth against ``url``, its home under ``tmp_path``.

    ``security.auth.selectedType`` is set because with ``GOOGLE_GEMINI_BASE_URL``
    alone the pinned CLI picks its ``gateway`` auth, which its own non-interactive
    check rejects ("Invalid auth method selected."). A named model (not ``auto``)
    skips the CLI's model router and its fallback chain, whose own attempt counts
    (3 and 10) override ``general.maxAttempts``; one attempt per request keeps the
    failure tests from sitting through the CLI's retries (docs/hosts.md).
    """
    home = tmp_path / "gemini-home"
    (home / ".gemini").mkdir(parents=True, exist_ok=True)
    settings = {
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "general": {"maxAttempts": 1, "disableAutoUpdate": True, "disableUpdateNag": True},
        "telemetry": {"enabled": False},
        "privacy": {"usageStatisticsEnabled": False},
    }
    (home / ".gemini" / "settings.json").write_text(json.dumps(settings))
    return {
        "GEMINI_CLI_HOME": str(home),
        "GOOGLE_GEMINI_BASE_URL": url,
        "GEMINI_API_KEY": "mock-gemini-key",
        "GEMINI_CLI_TRUST_WORKSPACE": "true",
        "GEMINI_MODEL": "gemini-mock",
    }


@pytest.fixture
def gemini_env(tmp_path: Path, mock: MockServer, release: str) -> dict[str, str]:
    """Gemini CLI pointed at the mock with GOOGLE_GEMINI_BASE_URL and an API key."""
    require_cli("gemini", release)
    return {**base_env(tmp_path, release), **gemini_home(tmp_path, mock.url)}


def opencode_home(tmp_path: Path, url: str) -> dict[str, str]:
    """OpenCode's environment: a custom OpenAI-compatible provider at ``url``, its home under ``tmp_path``.

    The provider uses the ``@ai-sdk/openai-compatible`` package OpenCode bundles (nothing
    is downloaded); the models.dev catalogue, the auto-update and sharing are off.
    """
    config = {
        "$schema": "https://opencode.ai/config.json",
        "provider": {
            "mock": {
                "npm": "@ai-sdk/openai-compatible",
                "name": "Mock",
                "options": {"baseURL": f"{url}/v1", "apiKey": "sk-mock"},
                "models": {"mock-model": {"name": "Mock"}},
            }
        },
        "model": "mock/mock-model",
        "autoupdate": False,
        "share": "disabled",
    }
    home = tmp_path / "opencode-home"
    (home / "config" / "opencode").mkdir(parents=True, exist_ok=True)
    (home / "config" / "opencode" / "opencode.json").write_text(json.dumps(config))
    return {
        "XDG_CONFIG_HOME": str(home / "config"),
        "XDG_DATA_HOME": str(home / "data"),
        "XDG_STATE_HOME": str(home / "state"),
        "XDG_CACHE_HOME": str(home / "cache"),
        "OPENCODE_DISABLE_MODELS_FETCH": "1",
        "OPENCODE_DISABLE_AUTOUPDATE": "1",
        "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
    }


def qwen_home(tmp_path: Path, url: str) -> dict[str, str]:
    """Qwen Code's environment: OpenAI auth against ``url``, its ``~/.qwen`` under ``tmp_path``.

    ``model.generationConfig.maxRetries: 0`` turns off the CLI's own rate-limit retry loop
    (ten retries a minute apart); its seven attempts per model call with backoff stay.
    """
    home = tmp_path / "qwen-home"
    (home / ".qwen").mkdir(parents=True, exist_ok=True)
    settings = {
        "security": {"auth": {"selectedType": "openai"}},
        "model": {"generationConfig": {"maxRetries": 0}},
        "general": {"disableAutoUpdate": True},
        "telemetry": {"enabled": False},
        "privacy": {"usageStatisticsEnabled": False},
    }
    (home / ".qwen" / "settings.json").write_text(json.dumps(settings))
    return {
        "HOME": str(home),
        "OPENAI_API_KEY": "sk-mock",
        "OPENAI_BASE_URL": f"{url}/v1",
        "OPENAI_MODEL": "mock-model",
    }


def pi_home(tmp_path: Path, url: str) -> dict[str, str]:
    """pi's environment: a custom ``openai-completions`` provider at ``url``, its agent dir under ``tmp_path``.

    ``retry.enabled: false`` turns off pi's own retries of a failed model call.
    """
    agent = tmp_path / "pi-agent"
    agent.mkdir(parents=True, exist_ok=True)
    provider = {
        "baseUrl": f"{url}/v1",
        "api": "openai-completions",
        "apiKey": "MOCK_API_KEY",
        "models": [{"id": "mock-model"}],
    }
    (agent / "models.json").write_text(json.dumps({"providers": {"mock": provider}}))
    settings = {
        "retry": {"enabled": False},
        "defaultProvider": "mock",
        "defaultModel": "mock-model",
    }
    (agent / "settings.json").write_text(json.dumps(settings))
    return {
        "PI_CODING_AGENT_DIR": str(agent),
        "MOCK_API_KEY": "sk-mock",
        "PI_OFFLINE": "1",
        "PI_SKIP_VERSION_CHECK": "1",
    }


# What aider is told of the mock's model (its model database's fields): a context window, so
# that it warns of nothing, and prices, so that it reports a cost.
AIDER_MODEL_INFO = {
    "max_input_tokens": 128_000,
    "max_output_tokens": 4096,
    "input_cost_per_token": 1e-6,
    "output_cost_per_token": 2e-6,
    "litellm_provider": "openai",
    "mode": "chat",
}


def aider_home(tmp_path: Path, url: str) -> dict[str, str]:
    """aider's environment: the mock as its OpenAI endpoint, its ``~/.aider`` under ``tmp_path``.

    aider fetches litellm's model database from GitHub when its cached copy (under
    ``~/.aider/caches``, a day old at most) is missing or empty: a copy that knows the mock's
    model is written there, so no run reaches the network. ``AIDER_CHECK_UPDATE``,
    ``LITELLM_LOCAL_MODEL_COST_MAP`` keep aider and litellm off the network too. The model and
    the edit format are the goal's host flags (:data:`AIDER_FLAGS`).
    """
    home = tmp_path / "aider-home"
    caches = home / ".aider" / "caches"
    caches.mkdir(parents=True, exist_ok=True)
    models = {"openai/mock-model": AIDER_MODEL_INFO}
    (caches / "model_prices_and_context_window.json").write_text(json.dumps(models))
    return {
        "HOME": str(home),
        "PATH": f"{bin_of('pinned', 'aider')}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "OPENAI_API_BASE": f"{url}/v1",
        "OPENAI_API_KEY": "sk-mock",
        "AIDER_CHECK_UPDATE": "false",
        "AIDER_ANALYTICS": "false",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    }


# The goal's host flags that make aider use the mock's model and answer in whole files.
AIDER_FLAGS = "--model openai/mock-model --edit-format whole"


@pytest.fixture
def aider_env(tmp_path: Path, mock: MockServer) -> dict[str, str]:
    """aider pointed at the mock's Chat Completions API with OPENAI_API_BASE."""
    require_cli("aider")
    return {**base_env(tmp_path), **aider_home(tmp_path, mock.url)}


@pytest.fixture
def pi_env(tmp_path: Path, mock: MockServer) -> dict[str, str]:
    """pi pointed at the mock's Chat Completions API through a custom provider."""
    require_cli("pi")
    return {**base_env(tmp_path), **pi_home(tmp_path, mock.url)}


@pytest.fixture
def opencode_env(tmp_path: Path, mock: MockServer) -> dict[str, str]:
    """OpenCode pointed at the mock's Chat Completions API through a custom provider."""
    require_cli("opencode")
    return {**base_env(tmp_path), **opencode_home(tmp_path, mock.url)}


@pytest.fixture
def qwen_env(tmp_path: Path, mock: MockServer) -> dict[str, str]:
    """Qwen Code pointed at the mock's Chat Completions API with OPENAI_BASE_URL."""
    require_cli("qwen")
    return {**base_env(tmp_path), **qwen_home(tmp_path, mock.url)}


def add_goal(
    cli: Any, env: dict[str, str], goal_id: str, kind: str, work: Path, *flags: str
) -> None:
    """Register a goal of host ``kind`` (its CLI found on the PATH of ``env``)."""
    work.mkdir(exist_ok=True)
    cli.run(
        "goal", "add", goal_id, "--objective", "list the files", "--workdir", str(work),
        "--host-kind", kind, *flags, check=True, **env,
    )  # fmt: skip


def run_once(cli: Any, goal_id: str, env: dict[str, str], timeout: float = 120) -> dict[str, Any]:
    """One real turn through `loopx turn run-once`: its run log (runs/<seq>.json)."""
    proc = cli.run("turn", "run-once", goal_id, "--json", timeout=timeout, **env)
    assert proc.stdout, proc.stderr
    report = json.loads(proc.stdout)["report"]
    assert report is not None, proc.stdout
    run_log = cli.root / "goals" / goal_id / "runs" / f"{report['seq']}.json"
    return {**report, **json.loads(run_log.read_text())}


def goal_state(cli: Any, goal_id: str) -> dict[str, Any]:
    return cli.json("goal", "show", goal_id)["state"]
