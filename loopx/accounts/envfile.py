"""An account's env file: its credentials, read only when it is 0600 and the user's.

One ``KEY=VALUE`` a line; blank lines, ``# comments`` and a leading
``export`` are allowed, a value may be quoted. The values never leave the
host's environment: every one is a secret to :mod:`loopx.secrets`'s redaction.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Final

from loopx.accounts.records import ENV_NAME
from loopx.errors import AccountEnvFileError

MAX_ENV_FILE_BYTES: Final = 64 * 1024
MIN_SECRET_LEN: Final = 6  # as loopx.secrets: shorter values would redact ordinary words


def check_env_file(path: Path) -> None:
    """Refuse a missing, foreign, group- or world-accessible env file.

    Raises:
        AccountEnvFileError: what is wrong with it.
    """
    try:
        st = path.stat()
    except FileNotFoundError:
        raise AccountEnvFileError(path, "no such file") from None
    except OSError as e:
        raise AccountEnvFileError(path, e.strerror or str(e)) from e
    if not stat.S_ISREG(st.st_mode):
        raise AccountEnvFileError(path, "not a regular file")
    if st.st_uid != os.geteuid():
        raise AccountEnvFileError(path, f"owned by uid {st.st_uid}, not by you ({os.geteuid()})")
    if st.st_mode & 0o077:
        raise AccountEnvFileError(
            path, f"mode {stat.S_IMODE(st.st_mode):04o} lets others read it; it must be 0600"
        )


def parse_env_text(text: str, path: Path | str) -> dict[str, str]:
    """The variables of an env file's text. Pure.

    Raises:
        AccountEnvFileError: a line is not ``KEY=VALUE``.
    """
    env: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        line = line.removeprefix("export ").lstrip()
        name, sep, value = line.partition("=")
        name = name.strip()
        if not sep or not ENV_NAME.fullmatch(name):
            raise AccountEnvFileError(path, f"line {number} is not KEY=VALUE")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":  # noqa: PLR2004
            value = value[1:-1]
        env[name] = value
    return env


def read_env_file(path: Path) -> dict[str, str]:
    """The checked env file's variables.

    Raises:
        AccountEnvFileError: missing, insecure, too large or malformed.
    """
    check_env_file(path)
    try:
        with path.open("rb") as f:
            data = f.read(MAX_ENV_FILE_BYTES + 1)
    except OSError as e:
        raise AccountEnvFileError(path, e.strerror or str(e)) from e
    if len(data) > MAX_ENV_FILE_BYTES:
        raise AccountEnvFileError(path, f"larger than {MAX_ENV_FILE_BYTES} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise AccountEnvFileError(path, "not UTF-8 text") from None
    return parse_env_text(text, path)


def file_secrets(env: dict[str, str]) -> list[str]:
    """Every value of an env file long enough to redact: all of them are credentials."""
    return sorted({v for v in env.values() if len(v) >= MIN_SECRET_LEN}, key=len, reverse=True)
