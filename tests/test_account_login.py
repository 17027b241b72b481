"""A login per account: its own CLI directory, `account login|check`, and a refused login.

Each named account of a CLI host kind owns a 0700 directory under the root that
its hosts' CLI reads its configuration and login from; two accounts never share
one. `account login` runs the CLI's own login into it, `account check` makes one
call through the CLI; a refused login is the ``auth`` outcome that parks the
account ``login_refused``, told once, never a failure of the goal.
"""

from __future__ import annotations

import json
import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import loopx
from loopx.accounts import observation, rules
from loopx.accounts.accountfiles import read_state
from loopx.accounts.accountstore import reopen_login, update_state
from loopx.accounts.clihome import config_dir, host_environment
from loopx.accounts.outputs import CheckOutcome
from loopx.accounts.records import AccountState, AccountSummary, Condition, Signal, TurnSignal
from loopx.agents.hosts.diagnosis import Diagnosis, diagnose
from loopx.agents.login import check_argv, login_argv
from loopx.errors import UsageError
from loopx.notify.events import conditions, events_between
from loopx.notify.targets import EventKind
from loopx.root import Layout
from loopx.status.view import FleetView, StatusCounts, StatusProjection
from loopx.testing import install_fake_host
from tests.turnkit import loopx_here

pytestmark = pytest.mark.timeout(60)

NOW = datetime(2026, 12, 6, 9, 0, tzinfo=UTC)


def _root(tmp_path: Path) -> loopx.Root:
    return loopx.Root.open(tmp_path / "root", create=True)


def _env_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "creds.env"
    path.write_text(text)
    path.chmod(0o600)
    return path


# --- the directory ---------------------------------------------------------------------------


def test_two_accounts_of_one_cli_get_two_private_directories(tmp_path: Path) -> None:
    """Each codex account has its own 0700 CODEX_HOME under the root; none is shared."""
    root = _root(tmp_path)
    root.accounts.add("work", host_kind="codex")
    root.accounts.add("home", host_kind="codex")
    layout = Layout.at(root.path)
    work, home = config_dir(layout, "work"), config_dir(layout, "home")
    assert work is not None and home is not None and work != home
    for path in (work, home):
        assert path.is_relative_to(root.path)
        assert stat.S_IMODE(path.stat().st_mode) == 0o700
    assert host_environment(layout, "work").env == {"CODEX_HOME": str(work)}
    assert root.accounts.show("home").summary.config_dir == str(home)


@pytest.mark.parametrize(
    ("kind", "var"),
    [("codex", "CODEX_HOME"), ("claude", "CLAUDE_CONFIG_DIR"), ("gemini", "GEMINI_CLI_HOME")],
)
def test_each_cli_reads_its_own_variable_over_the_env_file(
    tmp_path: Path, kind: str, var: str
) -> None:
    """The account's directory wins over the same variable in its env file."""
    root = _root(tmp_path)
    creds = _env_file(tmp_path, f"{var}=/home/me/shared\nAPI_TOKEN=tok-123456\n")
    root.accounts.add("acct", host_kind=kind, env_file=creds)
    layout = Layout.at(root.path)
    env = host_environment(layout, "acct").env
    assert env[var] == str(config_dir(layout, "acct"))
    assert env["API_TOKEN"] == "tok-123456"


def test_an_account_of_no_known_cli_and_a_default_account_get_none(tmp_path: Path) -> None:
    """`command` and `demo` accounts, and `default-codex` (the supervisor's own), have none."""
    root = _root(tmp_path)
    root.accounts.add("plain", host_kind="command")
    layout = Layout.at(root.path)
    assert config_dir(layout, "plain") is None
    assert config_dir(layout, "default-codex") is None
    assert host_environment(layout, "plain").env == {}
    assert root.accounts.show("plain").summary.config_dir is None


def test_a_directory_opened_up_is_made_private_again(tmp_path: Path) -> None:
    """A login is the account's alone: a 0755 directory is 0700 again at its next host run."""
    root = _root(tmp_path)
    root.accounts.add("work", host_kind="claude")
    layout = Layout.at(root.path)
    path = config_dir(layout, "work")
    assert path is not None
    path.chmod(0o755)
    host_environment(layout, "work")
    assert stat.S_IMODE(path.stat().st_mode) == 0o700


def test_env_naming_the_cli_directory_is_refused(tmp_path: Path) -> None:
    """`--env CODEX_HOME=...` would share a login: refused, nothing written."""
    root = _root(tmp_path)
    with pytest.raises(UsageError, match="its own CODEX_HOME"):
        root.accounts.add("work", host_kind="codex", env=["CODEX_HOME=/home/me/.codex"])
    assert not (root.path / "accounts" / "work").exists()


# --- the typed auth outcome ------------------------------------------------------------------


@pytest.mark.parametrize(
    "said",
    [
        "unexpected status 401 Unauthorized: Your authentication token has been invalidated.",
        (
            "Your access token could not be refreshed because your refresh token was revoked. "
            "Please log out and sign in again."
        ),
        "Failed to authenticate. API Error: 401 OAuth token has been revoked.",
        "OAuth token revoked · Please run /login",
        (
            "Your account does not have access to Claude. Please login again or contact your "
            "administrator."
        ),
        '{"error":{"code":401,"message":"Request had invalid authentication credentials."}}',
    ],
)
def test_each_clis_words_for_a_refused_login_are_auth(said: str) -> None:
    """What Codex, Claude Code and Gemini CLI print for an expired or revoked login."""
    assert diagnose(said) is Diagnosis.AUTH


def _auth(key: str = "g1-1-1#1", goal: str = "g1") -> TurnSignal:
    return TurnSignal(
        account="plan", goal_id=goal, turn_key=key, signal=Signal.AUTH, at=NOW, message="401"
    )


def test_a_refused_login_parks_the_account_once_whatever_number_of_turns_meet_it() -> None:
    """The second goal's refused turn keeps the first gate; the account says what to do."""
    first = observation.observe(AccountState(name="plan", proven=True), _auth())
    second = observation.observe(first, _auth(key="g2-1-1#1", goal="g2"))
    assert (second.login_refused, second.gate) == (True, first.gate)
    assert first.gate is not None
    assert "loopx account login plan" in first.gate.question
    refusal = rules.admit(second, "g3", now=NOW)
    assert (refusal.allowed, refusal.message) == (False, first.gate.question)


def test_a_default_account_is_told_to_log_its_user_in() -> None:
    """`default-codex` has no directory of its own: its user logs in, then resolves."""
    question = observation.login_question("default-codex", "401")
    assert "loopx account resolve default-codex" in question
    assert "account login" not in question


def test_only_an_account_parked_for_its_login_is_reopened_by_a_check(tmp_path: Path) -> None:
    """A passing check reopens ``login_refused`` (a probe goes first); a limit stays."""
    layout = Layout.at(_root(tmp_path).path)
    update_state(layout, "a", lambda s: observation.observe(s, _auth()))
    until = NOW + timedelta(hours=1)
    update_state(layout, "b", lambda s: s.model_copy(update={"condition": Condition.LIMITED,
                                                             "until": until}))  # fmt: skip
    reopened = reopen_login(layout, "a", now=NOW)
    assert (reopened.condition, reopened.gate, reopened.proven) == (Condition.OK, None, False)
    assert reopen_login(layout, "b", now=NOW) == read_state(layout, "b")
    assert read_state(layout, "b").condition is Condition.LIMITED


def _projection(*accounts: AccountSummary) -> StatusProjection:
    return StatusProjection(
        generated_at=NOW,
        checked_at=NOW,
        counts=StatusCounts(),
        fleet=FleetView(),
        accounts=list(accounts),
    )


def test_a_refused_login_is_one_auth_notification() -> None:
    """``auth:account:NAME`` once; the same parking in the next projection is not new."""
    parked = AccountSummary(
        name="plan", state=Condition.LOGIN_REFUSED, message="account plan: login refused"
    )
    (event,) = events_between(_projection(), _projection(parked))
    assert (event.id, event.kind) == ("auth:account:plan", EventKind.AUTH)
    assert events_between(_projection(parked), _projection(parked)) == []
    assert parked.login_refused
    assert "auth:account:plan" in conditions(_projection(parked))


# --- login and check through the CLI ---------------------------------------------------------


def test_login_and_check_commands_per_cli() -> None:
    """Device code where the CLI offers it; an API key account logs codex in from its key."""
    assert login_argv("codex", device_code=True, api_key=False) == [
        "codex", "login", "--device-auth"]  # fmt: skip
    assert login_argv("codex", device_code=False, api_key=True)[-1] == "--with-api-key"
    assert login_argv("claude", device_code=True, api_key=False) == ["claude", "auth", "login"]
    assert check_argv("codex")[:2] == ["codex", "exec"]
    with pytest.raises(UsageError, match="no CLI login"):
        login_argv("command", device_code=False, api_key=False)


def test_login_runs_the_cli_with_the_accounts_directory_and_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`codex login --with-api-key` gets the env file's key on stdin, CODEX_HOME its own."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "codex"
    script.write_text('#!/bin/sh\necho "$*" > "$CODEX_HOME/argv"\ncat > "$CODEX_HOME/key"\n')
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    root = _root(tmp_path)
    root.accounts.add(
        "work", host_kind="codex", env_file=_env_file(tmp_path, "OPENAI_API_KEY=sk-w1\n")
    )
    assert root.accounts.login("work") == 0
    home = config_dir(Layout.at(root.path), "work")
    assert home is not None
    assert (home / "argv").read_text() == "login --with-api-key\n"
    assert (home / "key").read_text() == "sk-w1\n"


def test_check_parks_a_refused_login_and_reopens_it_when_it_gets_through(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fake codex's 401: exit 4, ``login_refused``; then it gets through: exit 0, ``ok``."""
    bin_dir = tmp_path / "bin"
    install_fake_host(bin_dir, "codex")
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setenv("FAKE_CODEX_HOME", str(tmp_path / "fake"))
    root = _root(tmp_path)
    root.accounts.add("work", host_kind="codex")
    monkeypatch.setenv("FAKE_CODEX_MODE", "auth")
    refused = loopx_here(root.path, "account", "check", "work", "--json")
    assert refused.returncode == 4, refused.stderr
    found = json.loads(refused.stdout)
    assert (found["outcome"], found["state"]) == (CheckOutcome.AUTH, "login_refused")
    assert "401" in found["message"]
    monkeypatch.setenv("FAKE_CODEX_MODE", "ok")
    passed = loopx_here(root.path, "account", "check", "work")
    assert passed.returncode == 0, passed.stderr
    assert passed.stdout.startswith("work: ok (account ok)")
