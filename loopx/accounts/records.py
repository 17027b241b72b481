"""The account files and the records of the account rules.

``accounts/<name>/account.json`` (:class:`Account`) is the policy a person
writes with `loopx account add|edit`: its host kind, the environment its
goals' hosts run with (credentials only in the 0600 env file it names), its
resume policy and budget. ``accounts/<name>/state.json``
(:class:`AccountState`) is what LoopX learned from its turns: limited until a
reset, overloaded, waiting for a human, which goal holds the probe.

A goal without ``account`` uses its host kind's default account,
``default-<kind>``: the supervisor's own environment, no file needed.
"""

from __future__ import annotations

import os
import re
from enum import StrEnum
from typing import Annotated, Final, Literal

from pydantic import Field, field_validator

from loopx.accounts.windows import AdmissionPolicy, UsageWindow
from loopx.ids import is_valid_goal_id
from loopx.model import Record, UtcDatetime
from loopx.registry.goalrecords import HostKindName
from loopx.sandbox import SandboxSpec

DEFAULT_PREFIX: Final = "default-"
ENV_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
APPLIED_KEPT: Final = 64  # turn keys an account state remembers: a replay of one is a no-op


def default_account(host_kind: str) -> str:
    """The account goals of ``host_kind`` share when they name none."""
    return f"{DEFAULT_PREFIX}{host_kind}"


def account_of(account: str | None, host_kind: str) -> str:
    """The account a goal's turns run on: the one it names, else its host kind's default."""
    return account or default_account(host_kind)


def is_default(name: str) -> bool:
    """Whether ``name`` is a host kind's default account (no file of its own)."""
    return name.startswith(DEFAULT_PREFIX)


def valid_account_name(name: str) -> bool:
    """Whether ``name`` is a safe single path segment for an account (a goal id's rule)."""
    return is_valid_goal_id(name)


class OnLimit(StrEnum):
    """What a usage limit does: wait for the reset, ask a human, or pause the goal."""

    WAIT = "wait"
    GATE = "gate"
    STOP = "stop"


class AccountBudget(Record):
    """Caps on an account's (or the whole root's) spend in a rolling window; None: no cap."""

    max_tokens: Annotated[int, Field(ge=1)] | None = None
    max_cost_usd: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = None
    window_hours: Annotated[float, Field(gt=0, le=24 * 366, allow_inf_nan=False)] = 24.0

    @property
    def capped(self) -> bool:
        """Whether any cap is set."""
        return self.max_tokens is not None or self.max_cost_usd is not None


class Account(Record):
    """``accounts/<name>/account.json``: one provider account's policy."""

    schema_version: Literal[1] = 1
    name: str
    host_kind: HostKindName
    env_file: str | None = None  # absolute; 0600 and the user's, checked at every read
    env: dict[str, str] = Field(default_factory=dict)  # non-secret settings (CODEX_HOME, ...)
    on_limit: OnLimit = OnLimit.WAIT
    max_limit_waits: Annotated[int, Field(ge=0)] | None = None  # None: wait every time
    max_overloads: Annotated[int, Field(ge=1, le=1000)] = 5  # in a row, then a gate
    # Turns handed off to it from other accounts per budget window (None: no cap).
    max_handoffs: Annotated[int, Field(ge=0)] | None = None
    # Automatic resumes of its stalled hosts (the stall ladder's runs) per budget window.
    max_resumes: Annotated[int, Field(ge=0)] | None = None
    budget: AccountBudget = Field(default_factory=AccountBudget)
    price_in_per_mtok: Annotated[float, Field(ge=0, allow_inf_nan=False)] | None = None
    price_out_per_mtok: Annotated[float, Field(ge=0, allow_inf_nan=False)] | None = None
    # Where the account stops starting turns in a provider window (--admit-until).
    admission: AdmissionPolicy = Field(default_factory=AdmissionPolicy)
    # The sandbox a goal added on this account gets when `goal add` names none (docs/sandbox.md).
    sandbox: SandboxSpec | None = None
    created_at: UtcDatetime
    updated_at: UtcDatetime

    @field_validator("name")
    @classmethod
    def _safe_name(cls, value: str) -> str:
        if not valid_account_name(value) or is_default(value):
            msg = (
                f"account name {value!r}: use letters, digits, '.', '_' or '-' (at most 64), "
                f"not starting with {DEFAULT_PREFIX!r}"
            )
            raise ValueError(msg)
        return value

    @field_validator("env_file")
    @classmethod
    def _absolute(cls, value: str | None) -> str | None:
        if value is not None and not os.path.isabs(value):
            msg = f"env_file must be an absolute path, got {value!r}"
            raise ValueError(msg)
        return value

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        for name, text in value.items():
            if not ENV_NAME.fullmatch(name) or "\x00" in text:
                msg = f"environment variable {name!r} is not a valid name (or its value has NUL)"
                raise ValueError(msg)
        return value


class Condition(StrEnum):
    """An account's state as status shows it."""

    OK = "ok"
    LIMITED = "limited"  # a usage limit: no turn before ``until``
    OVERLOADED = "overloaded"  # the model server is overloaded: no turn before ``until``
    BUDGET_SPENT = "budget_spent"  # a budget of the window is spent: a gate is open
    NEEDS_HUMAN = "needs_human"  # too many overloads or limits, a policy gate
    # An expired, revoked or refused login (the typed ``auth`` outcome): a gate is open and
    # only a new login (`loopx account login`, then `account check`) or a human clears it.
    LOGIN_REFUSED = "login_refused"
    # A file of the account cannot be read: its goals wait until a human repairs it. Only
    # shown (status, `account list`), never written: a damaged state is not rewritten.
    DAMAGED = "damaged"


class AccountGate(Record):
    """The one question an account asks a human; answered by `loopx account resolve`."""

    question: str
    opened_at: UtcDatetime
    opened_by: str  # the turn key that opened it, or "budget"
    goal_id: str | None = None


class AccountState(Record):
    """``accounts/<name>/state.json``: what the account's turns taught LoopX.

    Every change is made under the file's lock by :mod:`loopx.accounts.accountstore`;
    a turn's effect is fenced by its key (``applied``), so replaying a turn
    (recovery, a second agent finishing the same journal) changes nothing.
    """

    schema_version: Literal[1] = 1
    name: str
    condition: Condition = Condition.OK
    until: UtcDatetime | None = None  # limited/overloaded until
    reason: str = ""  # the provider's words (the CLI's, redacted)
    seen_by_goal: str | None = None
    seen_by_turn: str | None = None
    limit_hits: int = 0  # usage limits in a row (a probe hitting it again backs off)
    reset_unknown: bool = False  # limited by LoopX's own backoff: the provider gave no reset
    limit_waits: int = 0  # resets waited for since a human last looked
    overloads: int = 0  # overloads in a row
    # The N in force when the latest overload was judged (from its journal's plan): with
    # ``overloads`` it is what the gate decision used, kept so a reader sees the same.
    max_overloads: int | None = None
    proven: bool = False  # a turn got through since the account was added or reset
    probe_goal: str | None = None  # the goal whose turn goes first after a reset
    probe_until: UtcDatetime | None = None  # the probe's hold ends (its turn died) then
    next_start_at: UtcDatetime | None = None  # staggered starts after a probe got through
    stagger_until: UtcDatetime | None = None
    gate: AccountGate | None = None
    applied: list[str] = Field(default_factory=list)  # the newest turn keys applied
    # The provider's windows as the account's turns last reported them, one per name.
    windows: list[UsageWindow] = Field(default_factory=list)
    updated_at: UtcDatetime | None = None

    @property
    def login_refused(self) -> bool:
        """Whether the account is parked because its login was refused (the ``auth`` outcome)."""
        return self.condition is Condition.LOGIN_REFUSED


class Signal(StrEnum):
    """What a turn's outcome says about its account."""

    LIMIT = "limit"  # a usage limit or a 429 with a reset
    OVERLOAD = "overload"  # 5xx, "high demand"
    AUTH = "auth"  # not logged in, key invalid
    THROUGH = "through"  # the provider answered: the account works
    NONE = "none"  # nothing about the account (a crash before the host, a stop)


class TurnSignal(Record):
    """One turn's evidence about its account, derived from the journal alone."""

    account: str
    goal_id: str
    turn_key: str
    signal: Signal
    at: UtcDatetime  # the turn's end
    reset_at: UtcDatetime | None = None  # for LIMIT: when the provider said it resets
    message: str = ""
    on_limit: OnLimit = OnLimit.WAIT
    max_limit_waits: int | None = None
    max_overloads: int = 5
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0  # as the host reported it (0: none reported)
    windows: list[UsageWindow] = Field(default_factory=list)  # what the host reported


class RootBudget(Record):
    """``accounts/.root/budget.json``: the budget of every turn of the root together."""

    schema_version: Literal[1] = 1
    budget: AccountBudget = Field(default_factory=AccountBudget)
    updated_at: UtcDatetime


class WindowTotals(Record):
    """Spend inside the window ``(now - window_hours, now]``."""

    tokens: int = 0
    cost_usd: float = 0.0
    estimated_usd: float = 0.0  # the part of cost_usd estimated from prices
    window_hours: float = 24.0


class WindowBar(Record):
    """One provider window as status, `account show` and the dashboard draw it."""

    name: str
    label: str  # in words: 5-hour, weekly, weekly Opus
    used_percent: float
    mark: float | None  # the admission mark (None: off for this window)
    resets_at: UtcDatetime | None = None
    seen_at: UtcDatetime | None = None
    past_mark: bool = False  # it holds the account's goals back now


class AccountSummary(Record):
    """One account as `loopx status` and `account list|show` show it.

    ``state`` is ``ok``, ``limited`` (until ``until``), ``overloaded`` (until
    ``until``), ``budget_spent``, ``needs_human``, ``login_refused`` (its login
    was refused: ``loopx account login``) or ``damaged`` (``damaged_file``
    cannot be read); ``waiting`` lists the active goals the account holds back
    now; ``spend`` is what its window holds (only for budgeted accounts: spend
    is kept where a budget counts it); ``config_dir`` is the account's own CLI
    configuration directory (None for a default account or a host kind without one).
    """

    schema_version: Literal[1] = 1
    name: str
    host_kind: str | None = None  # None: the root's budget
    default: bool = False  # a host kind's default account (the supervisor's environment)
    state: Condition
    until: UtcDatetime | None = None
    message: str = ""  # why it holds its goals back, in words (empty when it does not)
    question: str | None = None  # the open gate's question
    seen_by_goal: str | None = None
    seen_by_turn: str | None = None
    probe_goal: str | None = None
    budget: AccountBudget | None = None
    spend: WindowTotals | None = None
    cost_estimated: bool = False  # some of the cost is estimated from the account's prices
    goals: list[str] = Field(default_factory=list)
    waiting: list[str] = Field(default_factory=list)
    damaged_file: str | None = None  # the account's file that cannot be read (state ``damaged``)
    windows: list[WindowBar] = Field(default_factory=list)  # the provider's, as last reported
    # Goals with a priority above this still start while ``message`` holds the others back
    # (a window past its mark, with --admit-past-priority); None: the message holds every goal.
    lets_past_priority: int | None = None
    config_dir: str | None = None  # its own CLI configuration directory (CODEX_HOME, ...)

    @property
    def login_refused(self) -> bool:
        """Whether the account is parked because its login was refused (the ``auth`` outcome)."""
        return self.state is Condition.LOGIN_REFUSED

    @property
    def whole_root(self) -> bool:
        """Whether this is the root's own budget (``.root``), not an account."""
        return self.name.startswith(".")  # no account's name starts with a dot


class Admission(Record):
    """May a goal of the account start a turn now: the answer of :func:`rules.admit`."""

    allowed: bool
    message: str = ""
    until: UtcDatetime | None = None  # a refusal that clears by itself clears then
    take_probe: bool = False  # allowed as the probe: the state must record it first
    take_stagger: bool = False  # allowed in the stagger: the next start moves on
