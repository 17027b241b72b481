"""Secrets from the environment never reach logs."""

from __future__ import annotations

import io

import structlog

from loopx.log import configure_logging
from loopx.secrets import REDACTED, is_secret_name, redact_env, redact_text, secret_values


def test_secret_names() -> None:
    """TOKEN, KEY, SECRET and PASSWORD anywhere in a name, any case, mark a secret."""
    assert all(
        is_secret_name(n) for n in ("GITHUB_TOKEN", "openai_api_key", "DB_PASSWORD", "MySecret")
    )
    assert not any(
        is_secret_name(n) for n in ("HOME", "PATH", "LOOPX_ROOT", "LOOPX_TURN_KEY", "turn_key")
    )


def test_values_are_redacted_from_text_and_env() -> None:
    """Known secret values are replaced in text; secret-named variables in an env copy."""
    env = {"API_KEY": "sk-live-123456", "HOME": "/root", "PIN_TOKEN": "1"}
    secrets = secret_values(env)
    assert secrets == ["sk-live-123456"]
    assert redact_text("using sk-live-123456 now", secrets) == f"using {REDACTED} now"
    assert redact_env(env) == {"API_KEY": REDACTED, "HOME": "/root", "PIN_TOKEN": REDACTED}


def test_logs_never_carry_secrets(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A log event with a secret-named key or a secret value is redacted before rendering."""
    monkeypatch.setenv("SERVICE_TOKEN", "tok-abcdef-987")
    out = io.StringIO()
    configure_logging(stream=out, force=True)
    try:
        structlog.get_logger().warning("host_said", text="token is tok-abcdef-987", api_key="x")
    finally:
        configure_logging(force=True)
    line = out.getvalue()
    assert "tok-abcdef-987" not in line
    assert '"api_key": "[REDACTED]"' in line
