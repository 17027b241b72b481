"""``root.accounts``: `loopx account add|list|show|edit|remove|resolve|budget|login|check`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Final

from pydantic import ValidationError

from loopx.accounts import accountfiles, accountstore
from loopx.accounts.clihome import config_var, ensure_config_dir
from loopx.accounts.envfile import read_env_file
from loopx.accounts.outputs import (
    AccountCheck,
    AccountDocument,
    AccountList,
    AccountShow,
    AccountSummary,
    CheckOutcome,
    redacted,
    summaries,
    summarise,
)
from loopx.accounts.records import Account, AccountBudget, RootBudget, is_default
from loopx.accounts.rollingbudget import ROOT_BUDGET, breach, raised
from loopx.accounts.windows import AdmissionPolicy, with_marks
from loopx.agents import login as cli_login
from loopx.errors import (
    AccountDamagedError,
    AccountExistsError,
    AccountInUseError,
    GoalStateError,
    InvalidPolicyError,
    UsageError,
)
from loopx.model import utcnow
from loopx.registry.catalog import load_registry
from loopx.root import Layout
from loopx.sandbox import SandboxOptions, SandboxSpec, sandbox_spec
from loopx.sandbox import unavailable as sandbox_unavailable
from loopx.secrets import is_secret_name
from loopx.storage.dirs import ensure_dir
from loopx.storage.files import describe_validation_error
from loopx.storage.locks import locked

BUDGET_FIELDS = ("max_tokens", "max_cost_usd", "window_hours")
ADMISSION_FIELDS = ("admit_until", "admit_past_priority", "no_admit_past")


def parse_env(items: Sequence[str] | Mapping[str, str] | None) -> dict[str, str] | None:
    """``--env K=V`` arguments as a dict (None when none was given).

    Raises:
        UsageError: an item is not ``K=V`` with a valid name, or names a secret (those
            belong in the 0600 env file).
    """
    if items is None:
        return None
    pairs = items.items() if isinstance(items, Mapping) else (i.partition("=")[::2] for i in items)
    out: dict[str, str] = {}
    for name, value in pairs:
        if not name or not name.replace("_", "a").isalnum() or name[0].isdigit():
            msg = f"--env {name}={value}: expected NAME=VALUE with a variable name"
            raise UsageError(msg, hint="for example --env CODEX_HOME=/srv/codex-work")
        if is_secret_name(name):
            msg = f"--env {name}=...: credentials do not go on the command line or in account.json"
            raise UsageError(msg, hint="put it in a 0600 file and pass --env-file FILE")
        out[name] = value
    for item in items if not isinstance(items, Mapping) else ():
        if "=" not in item:
            msg = f"--env {item!r}: expected NAME=VALUE"
            raise UsageError(msg, hint="for example --env CODEX_HOME=/srv/codex-work")
    return out


def _validated(values: dict[str, Any]) -> Account:
    try:
        return Account.model_validate(values)
    except ValidationError as e:
        first = e.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "account"
        raise InvalidPolicyError(field, describe_validation_error(e).split(": ", 1)[-1]) from e


def _admission(current: object, policy: Mapping[str, Any]) -> AdmissionPolicy:
    """The account's admission policy with the ``--admit-*`` options of ``policy`` applied.

    Raises:
        UsageError: a mark is not a percentage or ``off``.
    """
    base = AdmissionPolicy.model_validate(current) if current is not None else AdmissionPolicy()
    marks = policy.get("admit_until") or ()
    try:
        return with_marks(
            base,
            [marks] if isinstance(marks, str) else marks,
            past_priority=policy.get("admit_past_priority"),
            no_past=bool(policy.get("no_admit_past")),
        )
    except (ValueError, ValidationError) as e:
        msg = f"--admit-until: {e}"
        raise UsageError(
            msg, hint="for example --admit-until 95% or --admit-until weekly=80%"
        ) from e


@dataclass(frozen=True, slots=True)
class Accounts:
    """The provider accounts of one root."""

    layout: Layout

    def add(
        self,
        name: str,
        *,
        host_kind: str,
        env_file: str | Path | None = None,
        env: Sequence[str] | Mapping[str, str] | None = None,
        update: bool = False,
        now: datetime | None = None,
        **policy: Any,  # noqa: ANN401 - Account's policy fields (on_limit, budget fields, prices)
    ) -> AccountDocument:
        """`loopx account add`: register an account (nothing is written on any refusal).

        Raises:
            AccountExistsError: the name is taken.
            AccountEnvFileError: the env file is missing, not 0600 and yours, or malformed.
            UsageError: a malformed ``--env``, a secret in ``--env``, a bad name or value.
        """
        if is_default(name):
            msg = f"account {name!r}: default-<kind> names the supervisor's own environment"
            raise UsageError(msg, hint="choose another name")
        at = now or utcnow()
        with self._locked(name):
            if accountfiles.read_account(self.layout, name) is not None and not update:
                raise AccountExistsError(name)
            account = self._build(
                None, name=name, host_kind=host_kind, env_file=env_file, env=env,
                policy=policy, now=at,
            )  # fmt: skip
            accountstore.write_account(self.layout, account)
            ensure_config_dir(self.layout, account)
        return AccountDocument(account=redacted(account))

    def edit(
        self,
        name: str,
        *,
        env_file: str | Path | None = None,
        env: Sequence[str] | Mapping[str, str] | None = None,
        clear_env_file: bool = False,
        now: datetime | None = None,
        **policy: Any,  # noqa: ANN401 - Account's policy fields
    ) -> AccountDocument:
        """`loopx account edit`: change the named fields of an account.

        Raises:
            AccountNotFoundError: no such account.
            AccountEnvFileError, UsageError: as for :meth:`add`; nothing changed.
        """
        at = now or utcnow()
        with self._locked(name):
            existing = accountfiles.load_account(self.layout, name)
            account = self._build(
                existing, name=name, host_kind=existing.host_kind, env_file=env_file, env=env,
                policy=policy, now=at, clear=clear_env_file,
            )  # fmt: skip
            accountstore.write_account(self.layout, account)
        return AccountDocument(account=redacted(account))

    def _locked(self, name: str) -> AbstractContextManager[None]:
        """The lock every account policy change takes (rare; the directory may not exist yet)."""
        accountfiles.account_file(self.layout, name)  # the name is checked before anything is made
        return locked(ensure_dir(accountfiles.accounts_dir(self.layout)) / ".policy")

    def _build(
        self,
        existing: Account | None,
        *,
        name: str,
        host_kind: str,
        env_file: str | Path | None,
        env: Sequence[str] | Mapping[str, str] | None,
        policy: dict[str, Any],
        now: datetime,
        clear: bool = False,
    ) -> Account:
        values: dict[str, Any] = existing.model_dump() if existing is not None else {
            "name": name, "host_kind": host_kind, "created_at": now,
        }  # fmt: skip
        if env_file is not None:
            resolved = Path(env_file).expanduser().resolve()
            read_env_file(resolved)  # refused now, not at the first turn
            values["env_file"] = str(resolved)
        elif clear:
            values["env_file"] = None
        given_env = parse_env(env)
        own = config_var(host_kind)
        if given_env is not None and own in given_env:
            msg = f"--env {own}=...: account {name} has its own {own}, under the root"
            raise UsageError(msg, hint="log it in there with `loopx account login NAME`")
        if given_env is not None:
            values["env"] = {**values.get("env", {}), **given_env}
        values["sandbox"] = _account_sandbox(existing, policy)
        budget = dict(values.get("budget") or {})
        values["admission"] = _admission(values.get("admission"), policy)
        for key, value in policy.items():
            if value is None or key in ADMISSION_FIELDS:
                continue
            if key in BUDGET_FIELDS:
                budget[key] = value
            else:
                values[key] = value
        values["budget"] = budget
        values["updated_at"] = now
        return _validated(values)

    def list(self, *, now: datetime | None = None) -> AccountList:
        """`loopx account list`: every account with its state and goals."""
        goals = list(load_registry(self.layout).goals.values())
        return AccountList(accounts=summaries(self.layout, goals, now=now or utcnow()))

    def show(self, name: str, *, now: datetime | None = None) -> AccountShow:
        """`loopx account show`: the account's policy and summary.

        An account whose policy file is damaged is shown without its policy,
        its summary ``damaged`` and naming the file.

        Raises:
            AccountNotFoundError: no such account (a default one always exists).
        """
        account = None
        if not is_default(name):
            try:
                account = accountfiles.load_account(self.layout, name)
            except AccountDamagedError:
                account = None  # the summary reads it again and says what is damaged
        goals = list(load_registry(self.layout).goals.values())
        summary = summarise(self.layout, name, goals, now=now or utcnow(), account=account)
        return AccountShow(
            account=redacted(account) if account is not None else None, summary=summary
        )

    def remove(self, name: str) -> AccountDocument:
        """`loopx account remove`: drop an account no goal uses.

        Raises:
            AccountNotFoundError: no such account.
            AccountInUseError: goals name it; nothing was removed.
        """
        account = accountfiles.load_account(self.layout, name)
        users = sorted(g.id for g in load_registry(self.layout).goals.values() if g.account == name)
        if users:
            raise AccountInUseError(name, users)
        accountstore.remove_account(self.layout, name)
        return AccountDocument(account=redacted(account))

    def resolve(
        self, name: str | None, *, answer: str = "", now: datetime | None = None
    ) -> AccountSummary:
        """`loopx account resolve`: answer the account's (or, with None, the root's) gate.

        A spent budget's gate takes ``raise N`` (the cap it breached becomes N)
        and clears when its window refills by itself; any other gate clears on
        any answer, and the account's next turn goes first as a probe.

        Raises:
            AccountNotFoundError: no such account.
            GoalStateError: no gate is open, or a budget answer is not ``raise N`` above
                what was spent.
        """
        at = now or utcnow()
        key = ROOT_BUDGET if name is None else name
        if name is not None and not is_default(name):
            accountfiles.load_account(self.layout, name)
        state = accountfiles.read_state(self.layout, key)
        who = "the root's budget" if name is None else f"account {name}"
        if state.gate is None:
            msg = f"{who} has no open gate"
            raise GoalStateError(msg, hint="see `loopx account list`")
        if state.gate.opened_by == accountstore.BUDGET_GATE:
            self._raise_budget(key, answer, at)
            state = accountstore.check_budget(self.layout, key, now=at)
        else:
            state = accountstore.resolve_gate(self.layout, key, now=at)
        goals = list(load_registry(self.layout).goals.values())
        return summarise(self.layout, key, goals, now=at, state=state)

    def _raise_budget(self, key: str, answer: str, now: datetime) -> None:
        budget = accountfiles.budget_of(self.layout, key)
        found = breach(budget, accountfiles.read_spend(self.layout, key), now) if budget else None
        new = raised(budget, found, answer) if budget is not None and found is not None else None
        if new is None or budget is None or found is None:
            spent = f" above {found.spent:,.0f}" if found is not None else ""
            msg = f"answer `raise N` with N{spent} to raise the spent budget, got {answer!r}"
            raise GoalStateError(msg, hint="or wait until the window refills")
        if key == ROOT_BUDGET:
            accountstore.write_root_budget(self.layout, RootBudget(budget=new, updated_at=now))
        else:
            account = accountfiles.load_account(self.layout, key)
            accountstore.write_account(
                self.layout, account.model_copy(update={"budget": new, "updated_at": now})
            )

    def login(self, name: str, *, device_code: bool = False) -> int:
        """`loopx account login`: the CLI's own login, on this terminal, into the account's dir.

        Returns the CLI's exit code.

        Raises:
            AccountNotFoundError: no such account (a default one logs in as its user does).
            UsageError: the account's host kind has no CLI login.
            HostMissingError: the CLI is not installed.
        """
        return cli_login.login(self.layout, name, device_code=device_code)

    def check(self, name: str, *, now: datetime | None = None) -> AccountCheck:
        """`loopx account check`: one minimal authenticated call through the account's CLI.

        A refused login parks the account (``login_refused``, as a turn's
        would); a call that gets through reopens an account parked for its
        login (its next turn goes first as a probe). Other outcomes change nothing.

        Raises:
            AccountNotFoundError: no such account.
            UsageError: the account's host kind has no CLI.
        """
        found = cli_login.check(self.layout, name)
        at = now or utcnow()
        if found.outcome is CheckOutcome.AUTH:
            state = accountstore.park_login(self.layout, name, found.message, now=at)
        elif found.outcome is CheckOutcome.OK:
            state = accountstore.reopen_login(self.layout, name, now=at)
        else:
            state = accountfiles.read_state(self.layout, name)
        return found.model_copy(update={"state": state.condition})

    def set_root_budget(self, *, now: datetime | None = None, **fields: Any) -> RootBudget:  # noqa: ANN401 - AccountBudget fields
        """`loopx account budget`: set the whole root's budget (fields not given are kept)."""
        at = now or utcnow()
        current = accountfiles.read_root_budget(self.layout)
        values = current.budget.model_dump() if current is not None else {}
        values |= {k: v for k, v in fields.items() if v is not None}
        try:
            budget = AccountBudget.model_validate(values)
        except ValidationError as e:
            raise InvalidPolicyError("budget", describe_validation_error(e)) from e
        record = RootBudget(budget=budget, updated_at=at)
        accountstore.write_root_budget(self.layout, record)
        return record


# `account add|edit`'s sandbox keywords, in SandboxOptions' order.
SANDBOX_KEYS: Final = ("sandbox", "allow_domains", "autonomy", "max_processes", "max_file_mb")


def _account_sandbox(existing: Account | None, policy: dict[str, Any]) -> SandboxSpec | None:
    """The account's sandbox after the sandbox keywords of ``policy`` (taken out of it).

    Raises:
        SandboxUnavailableError: ``sandbox="bwrap"`` where bubblewrap cannot run.
        InvalidPolicyError: a sandbox option without a sandbox, or out of range.
    """
    options = SandboxOptions(*(policy.pop(key, None) for key in SANDBOX_KEYS))
    box = sandbox_spec(options, existing.sandbox if existing is not None else None)
    if box is not None and options.kind == "bwrap":
        refused = sandbox_unavailable()
        if refused is not None:
            raise refused
    return box


__all__ = ["Accounts"]
