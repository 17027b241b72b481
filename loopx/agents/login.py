"""`loopx account login|check`: the account's CLI, run with the account's own directory.

:func:`login` runs the CLI's own login interactively (the person at the
terminal answers it), with the account's environment, so the login lands in
the account's configuration directory (:mod:`loopx.accounts.clihome`):

* Codex: ``codex login`` (``--device-auth`` with ``--device-code``); an
  account whose env file holds ``OPENAI_API_KEY`` (or ``CODEX_API_KEY``):
  ``codex login --with-api-key``, the key on its stdin;
* Claude Code: ``claude auth login`` (it prints a URL to open anywhere and
  reads the code back: its login works on a headless machine as it is);
* Gemini CLI: ``gemini`` itself, where ``/auth`` logs in (``NO_BROWSER=true``
  with ``--device-code``: it prints a URL and reads the code back); quit it
  with ``/quit`` once logged in.

:func:`check` makes one minimal authenticated call through the CLI (a tiny
non-interactive run in an empty directory) and reads its failure as the host
adapters do (:mod:`loopx.agents.hosts.diagnosis`).
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path
from typing import Final

from loopx import environ
from loopx.accounts.accountfiles import load_account
from loopx.accounts.clihome import (
    HostEnvironment,
    config_dir_of,
    ensure_config_dir,
    host_environment,
)
from loopx.accounts.outputs import AccountCheck, CheckOutcome
from loopx.accounts.records import Account
from loopx.agents.hosts.diagnosis import Diagnosis, diagnose
from loopx.errors import HostMissingError, LoopxError, UsageError
from loopx.root import Layout
from loopx.secrets import redact_text

CHECK_TIMEOUT_S: Final = 120.0
CHECK_PROMPT: Final = "Reply with the single word OK. Do not use any tool."
API_KEY_VARS: Final = ("OPENAI_API_KEY", "CODEX_API_KEY")  # what `codex login --with-api-key` takes
_OUTCOMES: Final = {
    Diagnosis.AUTH: CheckOutcome.AUTH,
    Diagnosis.RATE_LIMIT: CheckOutcome.RATE_LIMIT,
    Diagnosis.UNREACHABLE: CheckOutcome.UNREACHABLE,
    Diagnosis.SERVER_ERROR: CheckOutcome.SERVER_ERROR,
}


def login_argv(host_kind: str, *, device_code: bool, api_key: bool) -> list[str]:
    """The CLI's own login command for an account of ``host_kind``. Pure.

    Raises:
        UsageError: the host kind has no CLI login.
    """
    if host_kind == "codex":
        if api_key:
            return ["codex", "login", "--with-api-key"]
        return ["codex", "login", "--device-auth"] if device_code else ["codex", "login"]
    if host_kind == "claude":
        return ["claude", "auth", "login"]
    if host_kind == "gemini":
        return ["gemini"]
    msg = f"host kind {host_kind!r} has no CLI login"
    raise UsageError(msg, hint="an account of codex, claude or gemini logs in")


def check_argv(host_kind: str) -> list[str]:
    """One tiny non-interactive run of the CLI (the prompt on stdin, but for Gemini). Pure.

    Raises:
        UsageError: the host kind has no CLI to check.
    """
    if host_kind == "codex":
        return ["codex", "exec", "--skip-git-repo-check", "--json", "-"]
    if host_kind == "claude":
        return ["claude", "-p", "--output-format", "json", "--max-turns", "1"]
    if host_kind == "gemini":  # its -p takes the prompt (stdin would be appended to it)
        return ["gemini", "-p", CHECK_PROMPT, "--output-format", "json"]
    msg = f"host kind {host_kind!r} has no CLI to check"
    raise UsageError(msg, hint="an account of codex, claude or gemini can be checked")


def _environment(layout: Layout, account: Account) -> tuple[dict[str, str], HostEnvironment]:
    """The account's host environment over this process's (no LoopX fault points), and its own."""
    own = host_environment(layout, account.name)
    env = environ.without((environ.FAULT,))
    env.update(own.env)
    return env, own


def login(layout: Layout, name: str, *, device_code: bool = False) -> int:
    """Run the CLI's login for account ``name`` on this terminal; its exit code.

    Raises:
        AccountNotFoundError: no such account.
        AccountEnvFileError: its env file cannot be used.
        UsageError: the account's host kind has no CLI login.
        HostMissingError: the CLI is not installed.
    """
    account = load_account(layout, name)
    ensure_config_dir(layout, account)
    env, own = _environment(layout, account)
    # The account's own key only (its env file): never one this shell happens to hold.
    key = next((own.env[v] for v in API_KEY_VARS if own.env.get(v)), None)
    api_key = account.host_kind == "codex" and key is not None
    argv = login_argv(account.host_kind, device_code=device_code, api_key=api_key)
    if device_code and account.host_kind == "gemini":
        env["NO_BROWSER"] = "true"
    stdin = f"{key}\n" if api_key else None  # the key on stdin: never in argv, never in a file
    try:
        done = subprocess.run(argv, input=stdin, text=True, env=env, check=False)
    except FileNotFoundError as e:
        raise HostMissingError(argv[0], account.host_kind) from e
    return done.returncode


def check(layout: Layout, name: str, *, timeout_s: float = CHECK_TIMEOUT_S) -> AccountCheck:
    """One minimal authenticated call through account ``name``'s CLI, and what it said.

    Raises:
        AccountNotFoundError: no such account.
        UsageError: the account's host kind has no CLI.
    """
    account = load_account(layout, name)
    argv = check_argv(account.host_kind)
    home = config_dir_of(layout, account)
    try:
        env, own = _environment(layout, account)
    except LoopxError as e:  # an env file others can read, a symlinked directory: as a turn
        return _result(account, home, CheckOutcome.AUTH, e.message, None)
    stdin = "" if account.host_kind == "gemini" else CHECK_PROMPT
    with tempfile.TemporaryDirectory(prefix="loopx-check-") as cwd:
        try:
            done = subprocess.run(
                argv, input=stdin, capture_output=True, text=True, env=env, cwd=cwd,
                timeout=timeout_s, check=False,
            )  # fmt: skip
        except FileNotFoundError:
            return _result(account, home, CheckOutcome.MISSING, f"{argv[0]} is not installed", None)
        except subprocess.TimeoutExpired:
            said = f"{argv[0]} did not answer in {timeout_s:g} s"
            return _result(account, home, CheckOutcome.ERROR, said, None)
    text = redact_text(f"{done.stdout}\n{done.stderr}", own.secrets)
    outcome = _outcome(done.returncode, text)
    return _result(account, home, outcome, _said(outcome, text), done.returncode)


def _outcome(code: int, text: str) -> CheckOutcome:
    """What a check's run says about the account: exit 0 got through, else its words. Pure."""
    if code == 0:
        return CheckOutcome.OK
    return _OUTCOMES.get(diagnose(text), CheckOutcome.ERROR)


def _said(outcome: CheckOutcome, text: str) -> str:
    """One line of the CLI's own words: the line that decided, else its last line. Pure."""
    if outcome is CheckOutcome.OK:
        return "the CLI's call got through"
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    deciding = [line for line in lines if diagnose(line) is not Diagnosis.OTHER]
    return ((deciding or lines or ["(the CLI printed nothing)"])[-1])[:300]


def _result(
    account: Account,
    home: Path | None,
    outcome: CheckOutcome,
    message: str,
    exit_code: int | None,
) -> AccountCheck:
    return AccountCheck(
        name=account.name,
        host_kind=account.host_kind,
        outcome=outcome,
        message=message,
        exit_code=exit_code,
        config_dir=str(home) if home is not None else None,
    )
