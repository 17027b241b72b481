"""Where `loopx serve`'s token comes from: never the command line.

In precedence order: ``--no-token`` (loopback only; no token), ``--token-file
FILE``, ``$LOOPX_SERVE_TOKEN``, else the root's ``serve.token`` (0600),
created with a random token on the first serve. A stored token is kept, so a
bookmarked URL keeps working across restarts; delete the file for a new one.
"""

from __future__ import annotations

import os
import secrets
import stat
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Final

from loopx.errors import UsageError
from loopx.root import Layout
from loopx.storage.files import exclusive_create, read_bytes
from loopx.web.bind import NoTokenOffLoopbackError, is_loopback

TOKEN_FILE: Final = "serve.token"  # noqa: S105 - a file name, not a token
MIN_TOKEN_CHARS: Final = 16
MAX_TOKEN_CHARS: Final = 512


class TokenSource(StrEnum):
    """Where the served token came from."""

    NONE = "none"  # --no-token
    FILE = "file"  # --token-file
    ENV = "env"  # $LOOPX_SERVE_TOKEN
    STORED = "stored"  # the root's serve.token, from an earlier serve
    CREATED = "created"  # the root's serve.token, made now


@dataclass(frozen=True, slots=True)
class ServeToken:
    """The token a server requires (None: none), and where it came from."""

    value: str | None
    source: TokenSource
    path: Path | None = None


class TokenFileError(UsageError):
    """A token file that is missing, empty, or readable by others."""

    def __init__(self, path: Path, problem: str, hint: str) -> None:
        super().__init__(f"token file {path}: {problem}", hint=hint)
        self.path = path


def token_file(layout: Layout) -> Path:
    """The root's ``serve.token``."""
    return layout.root / TOKEN_FILE


def _read_token(path: Path) -> str:
    try:
        info = os.stat(path)
        data = read_bytes(path)
    except FileNotFoundError as e:
        raise TokenFileError(path, "no such file", "write the token into it (chmod 600)") from e
    except OSError as e:
        raise TokenFileError(path, e.strerror or str(e), "check the path and its mode") from e
    if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise TokenFileError(
            path,
            f"mode {stat.S_IMODE(info.st_mode):o} lets other users read the token",
            f"chmod 600 {path}",
        )
    value = data.decode("utf-8", errors="replace").strip()
    if not MIN_TOKEN_CHARS <= len(value) <= MAX_TOKEN_CHARS or any(c.isspace() for c in value):
        raise TokenFileError(
            path,
            f"a token must be one word of {MIN_TOKEN_CHARS} to {MAX_TOKEN_CHARS} characters",
            'write one, e.g. python3 -c "import secrets; print(secrets.token_urlsafe(32))"',
        )
    return value


def resolve_token(
    layout: Layout,
    *,
    host: str,
    env_token: str | None,
    token_path: Path | None = None,
    no_token: bool = False,
) -> ServeToken:
    """The token to serve with, creating the root's stored one if nothing else names one.

    Raises:
        NoTokenOffLoopbackError: ``no_token`` on a non-loopback ``host``.
        TokenFileError: ``token_path`` (or the stored file) is unreadable, empty or open to others.

    """
    if no_token:
        if not is_loopback(host):
            raise NoTokenOffLoopbackError(host)
        return ServeToken(None, TokenSource.NONE)
    if token_path is not None:
        return ServeToken(_read_token(token_path), TokenSource.FILE, token_path)
    if env_token:
        return ServeToken(env_token, TokenSource.ENV)
    path = token_file(layout)
    value = secrets.token_urlsafe(32)
    if exclusive_create(path, f"{value}\n".encode()):
        return ServeToken(value, TokenSource.CREATED, path)
    return ServeToken(_read_token(path), TokenSource.STORED, path)
