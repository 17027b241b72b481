"""How each CLI is pointed at the canary's loopback endpoint, in a home of its own.

One function per host kind that takes a custom endpoint: given the endpoint's
URL and a private directory, it writes what the CLI reads there and returns
the environment to run it with (docs/hosts.md, "Pointing a CLI at a proxy").
A kind without an entry gets no smoke: only its version and flags are probed.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Final

from loopx.registry.goalrecords import HostKind

CANARY_KEY: Final = "loopx-canary-no-key"  # never leaves 127.0.0.1


def codex_endpoint(url: str, home: Path) -> dict[str, str]:
    """A provider in ``$CODEX_HOME/config.toml`` speaking the Responses API, retries off."""
    codex_home = home / "codex"
    codex_home.mkdir(parents=True, exist_ok=True)
    (codex_home / "config.toml").write_text(
        'model = "loopx-canary"\n'
        'model_provider = "canary"\n'
        "[model_providers.canary]\n"
        'name = "canary"\n'
        f'base_url = "{url}/v1"\n'
        'wire_api = "responses"\n'
        'env_key = "CANARY_API_KEY"\n'
        "request_max_retries = 0\n"
        "stream_max_retries = 0\n"
    )
    return {"CODEX_HOME": str(codex_home), "CANARY_API_KEY": CANARY_KEY}


def claude_endpoint(url: str, home: Path) -> dict[str, str]:
    """``ANTHROPIC_BASE_URL`` with a token of the subscriber kind, retries and traffic off."""
    return {
        "CLAUDE_CONFIG_DIR": str(home / "claude"),
        "ANTHROPIC_BASE_URL": url,
        "CLAUDE_CODE_OAUTH_TOKEN": CANARY_KEY,
        "CLAUDE_CODE_MAX_RETRIES": "0",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }


def gemini_endpoint(url: str, home: Path) -> dict[str, str]:
    """``GOOGLE_GEMINI_BASE_URL`` with API-key auth chosen in settings.json, one attempt a request.

    With the base URL alone Gemini CLI 0.61 picks an auth type its headless
    mode refuses; a named model skips its router, whose retries ignore
    ``general.maxAttempts``.
    """
    gemini_home = home / "gemini"
    (gemini_home / ".gemini").mkdir(parents=True, exist_ok=True)
    settings = {
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "general": {"maxAttempts": 1, "disableAutoUpdate": True, "disableUpdateNag": True},
        "telemetry": {"enabled": False},
        "privacy": {"usageStatisticsEnabled": False},
    }
    (gemini_home / ".gemini" / "settings.json").write_text(json.dumps(settings))
    return {
        "GEMINI_CLI_HOME": str(gemini_home),
        "GOOGLE_GEMINI_BASE_URL": url,
        "GEMINI_API_KEY": CANARY_KEY,
        "GEMINI_CLI_TRUST_WORKSPACE": "true",
        "GEMINI_MODEL": "loopx-canary",
    }


ENDPOINTS: Final[Mapping[str, Callable[[str, Path], dict[str, str]]]] = {
    HostKind.CODEX: codex_endpoint,
    HostKind.CLAUDE: claude_endpoint,
    HostKind.GEMINI: gemini_endpoint,
}
