"""Keeping secrets out of journals, run logs and logs.

An environment variable whose name contains TOKEN, KEY, SECRET or PASSWORD
(any case), other than LoopX's own ``LOOPX_*``, is a secret: its value is never written by LoopX. Host output is
stored after every such value found in the environment is replaced.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, MutableMapping
from typing import Any, Final

from loopx import environ

REDACTED: Final = "[REDACTED]"
_SECRET_NAME: Final = re.compile(r"TOKEN|KEY|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)
# LoopX's own identifiers that happen to contain KEY.
_OWN_NAMES: Final = frozenset({"turn_key", "key_field"})
# Short values ("1", "yes") would redact ordinary words; real secrets are longer.
_MIN_SECRET_LEN: Final = 6


def is_secret_name(name: str) -> bool:
    """Whether an environment variable or field of this name holds a secret.

    LoopX's own ``LOOPX_*`` variables (``LOOPX_TURN_KEY``) are not secrets.
    """
    if name.startswith(environ.PREFIX) or name.lower() in _OWN_NAMES:
        return False
    return _SECRET_NAME.search(name) is not None


def secret_values(env: Mapping[str, str]) -> list[str]:
    """The values of the secret-named variables of ``env``, longest first."""
    values = {v for k, v in env.items() if is_secret_name(k) and len(v) >= _MIN_SECRET_LEN}
    return sorted(values, key=len, reverse=True)


def redact_text(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every occurrence of each secret replaced by ``[REDACTED]``."""
    for value in secrets:
        if value in text:
            text = text.replace(value, REDACTED)
    return text


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """A copy of ``env`` with secret-named values replaced, for display or storage."""
    return {k: (REDACTED if is_secret_name(k) else v) for k, v in env.items()}


class RedactSecrets:
    """A structlog processor: secret-named keys and known secret values never reach a log."""

    def __init__(self, secrets: Iterable[str]) -> None:
        self.secrets = list(secrets)

    def __call__(
        self, _logger: object, _method: str, event: MutableMapping[str, Any]
    ) -> MutableMapping[str, Any]:
        """Redact one event dictionary in place."""
        for key, value in list(event.items()):
            if is_secret_name(key):
                event[key] = REDACTED
            elif isinstance(value, str) and self.secrets:
                event[key] = redact_text(value, self.secrets)
        return event
