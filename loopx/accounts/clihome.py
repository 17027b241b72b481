"""An account's own CLI configuration directory: one per account, never shared.

Each named account of a CLI host kind owns ``accounts/<name>/cli-home/``
(0700). Its goals' hosts run with the CLI's own variable pointing there, so
the CLI keeps that account's login (and settings, sessions) in it, and no two
accounts, and no desktop session, share a refresh token:

* Codex: ``CODEX_HOME`` (``auth.json``, ``config.toml``);
* Claude Code: ``CLAUDE_CONFIG_DIR`` (``.credentials.json``, ``settings.json``);
* Gemini CLI: ``GEMINI_CLI_HOME``, which stands for the home directory
  (``.gemini/oauth_creds.json``, ``.gemini/settings.json`` under it).

:func:`host_environment` is what an account adds to its goals' host runs;
the directory wins over the same variable in the account's ``--env`` or env
file. A default account (``default-<kind>``) is the supervisor's own
environment and gets none; nor does an account of a host kind without a
known CLI (``command``, ``demo``, a plug-in).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Final, NamedTuple

from loopx.accounts.accountfiles import accounts_dir, load_account, read_account
from loopx.accounts.envfile import file_secrets, read_env_file
from loopx.accounts.records import Account, is_default
from loopx.root import Layout
from loopx.storage.dirs import ensure_dir

CLI_HOME_NAME: Final = "cli-home"
PRIVATE: Final = 0o700
# The variable each CLI reads its configuration directory from (read from the pinned CLIs:
# codex 0.171, Claude Code 2.1.197, Gemini CLI 0.61's paths.ts `homedir()`).
CONFIG_ENV: Final[Mapping[str, str]] = {
    "codex": "CODEX_HOME",
    "claude": "CLAUDE_CONFIG_DIR",
    "gemini": "GEMINI_CLI_HOME",
}


def config_var(host_kind: str) -> str | None:
    """The variable naming ``host_kind``'s configuration directory; None for other kinds."""
    return CONFIG_ENV.get(host_kind)


def config_dir_of(layout: Layout, account: Account) -> Path | None:
    """Where ``account``'s CLI keeps its configuration and login; None when it has none. Pure."""
    if config_var(account.host_kind) is None:
        return None
    return accounts_dir(layout) / account.name / CLI_HOME_NAME


def config_dir(layout: Layout, name: str) -> Path | None:
    """The configuration directory of account ``name`` (made or not); None when it has none.

    What the sandbox mounts and `account show` prints. A default account, an
    unknown name and a host kind without a known CLI have none.

    Raises:
        AccountDamagedError: the account's policy file is damaged.
    """
    account = read_account(layout, name)
    return config_dir_of(layout, account) if account is not None else None


def ensure_config_dir(layout: Layout, account: Account) -> Path | None:
    """Make ``account``'s configuration directory (0700) if missing, and keep it 0700.

    A CLI or a person may have opened it up; a login in it is the account's alone.

    Raises:
        UnsafePathError: it is a symlink or not a directory.
    """
    path = config_dir_of(layout, account)
    if path is None:
        return None
    ensure_dir(path)
    if stat.S_IMODE(path.lstat().st_mode) != PRIVATE:
        os.chmod(path, PRIVATE)
    return path


def config_env(layout: Layout, account: Account) -> dict[str, str]:
    """The variable pointing ``account``'s CLI at its own directory (made if missing)."""
    path = ensure_config_dir(layout, account)
    var = config_var(account.host_kind)
    return {var: str(path)} if path is not None and var is not None else {}


class HostEnvironment(NamedTuple):
    """What an account adds to its goals' host runs: variables, and the values to redact."""

    env: dict[str, str]
    secrets: list[str]


def host_environment(layout: Layout, name: str) -> HostEnvironment:
    """The environment the account's goals' hosts run with (on top of the supervisor's).

    Its ``--env``, its env file's variables over them, and its own CLI
    configuration directory over both.

    Raises:
        AccountNotFoundError: a named account without a file.
        AccountEnvFileError: its env file is missing, insecure or malformed.
        UnsafePathError: its configuration directory is a symlink or not a directory.
    """
    if is_default(name):
        return HostEnvironment({}, [])
    account = load_account(layout, name)
    from_file = read_env_file(Path(account.env_file)) if account.env_file else {}
    env = account.env | from_file | config_env(layout, account)
    return HostEnvironment(env, file_secrets(from_file))
