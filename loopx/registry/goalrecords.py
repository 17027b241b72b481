"""The registry's records: each goal's policy (objective, workdir, host, quota, priority, status)."""

from __future__ import annotations

import os
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from loopx.donecheck import DoneCheckSpec
from loopx.ids import is_valid_goal_id, validate_goal_id
from loopx.model import Record, UtcDatetime
from loopx.registry.quota_policy import PositiveFloat, QuotaPolicy
from loopx.sandbox import SandboxSpec

# Handed-off turns a goal may take in any 24 hours unless it says otherwise.
DEFAULT_MAX_HANDOFFS_PER_DAY = 24


class GoalStatus(StrEnum):
    """A goal's lifecycle status in the registry."""

    ACTIVE = "active"
    PAUSED = "paused"
    DONE = "done"
    ARCHIVED = "archived"


class HostKind(StrEnum):
    """The built-in host kinds; plug-ins add more (entry-point group ``loopx.hosts``)."""

    COMMAND = "command"  # any argv speaking docs/host-protocol.md
    DEMO = "demo"  # the built-in demo host, `python -m loopx.agents.demo`
    CODEX = "codex"  # OpenAI Codex CLI (`codex exec --json`)
    CLAUDE = "claude"  # Claude Code (`claude -p --output-format json`)
    GEMINI = "gemini"  # Gemini CLI (`gemini --output-format json --prompt ""`)
    OPENCODE = "opencode"  # OpenCode (`opencode run --format json`)
    QWEN = "qwen"  # Qwen Code (`qwen --output-format json`)
    PI = "pi"  # the pi coding agent (`pi -p --mode json`)
    AIDER = "aider"  # aider (`aider --message-file /dev/stdin --yes-always`)


# A host kind's name: a built-in HostKind or a plug-in's entry-point name (docs/hosts.md).
# Any such name is accepted here, so a registry stays readable when a plug-in is uninstalled;
# `goal add` checks that an adapter is installed and a turn without one fails host_missing.
HOST_KIND_PATTERN = r"^[a-z][a-z0-9_-]{0,31}$"
HostKindName = Annotated[str, Field(pattern=HOST_KIND_PATTERN)]


class HostSpec(Record):
    """The program a goal's turns run.

    ``argv`` is the command for ``command`` hosts, extra arguments for the demo
    host, and extra CLI flags for ``codex``/``claude``/``gemini``. It is never given to a
    shell; write ``["sh", "-c", "..."]`` to ask for one.
    """

    kind: HostKindName = HostKind.DEMO
    argv: list[str] = Field(default_factory=list)
    # Start a fresh CLI session after this many turns of one session (codex/claude/gemini).
    session_max_turns: Annotated[int, Field(ge=1)] | None = None
    # codex: stop a host that only reports it cannot reach its model server after this many
    # seconds (None: 120); the turn commits a wait (host_unreachable), see docs/hosts.md.
    unreachable_after_s: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = None

    @field_validator("argv")
    @classmethod
    def _command_needs_argv(cls, argv: list[str]) -> list[str]:
        if any("\x00" in a for a in argv):
            msg = "host arguments may not contain NUL bytes"
            raise ValueError(msg)
        return argv

    @model_validator(mode="after")
    def _command_names_a_program(self) -> HostSpec:
        if self.kind == HostKind.COMMAND and not self.argv:
            msg = "a command host needs a program: pass --host 'CMD ARGS'"
            raise ValueError(msg)
        return self


class WorktreeSpec(Record):
    """A goal's own git worktree (docs/work.md): made on its first claim.

    The goal's ``workdir`` is the repository (or a folder inside it); its
    turns run in the same folder of a worktree on branch ``loopx/<id>`` made
    from ``base``, under ``folder`` (None: ``<root>/worktrees``).
    """

    base: Annotated[str, Field(min_length=1, max_length=255)]  # recorded at `goal add`
    include: list[Annotated[str, Field(min_length=1)]] = Field(default_factory=list)
    folder: str | None = None  # absolute; where the worktree folder <id> is made

    @field_validator("folder")
    @classmethod
    def _absolute_folder(cls, value: str | None) -> str | None:
        if value is not None and not os.path.isabs(value):
            msg = f"the worktree folder must be an absolute path, got {value!r}"
            raise ValueError(msg)
        return value

    @field_validator("include")
    @classmethod
    def _relative_patterns(cls, value: list[str]) -> list[str]:
        for pattern in value:
            if os.path.isabs(pattern) or ".." in pattern.split("/"):
                msg = f"--worktree-include patterns are relative to the repository, got {pattern!r}"
                raise ValueError(msg)
        return value


class Goal(Record):
    """``goals/<id>/goal.json``: one registered goal's policy."""

    schema_version: Literal[1] = 1
    id: str
    objective: Annotated[str, Field(min_length=1, max_length=20_000)]
    workdir: str
    host: HostSpec = Field(default_factory=HostSpec)
    priority: int = 0  # higher runs first
    status: GoalStatus = GoalStatus.ACTIVE
    quota: QuotaPolicy = Field(default_factory=QuotaPolicy)
    next_probe: str | None = None  # read-only shell command observing progress
    max_host_attempts: Annotated[int, Field(ge=1, le=100)] = 2  # host runs per turn after crashes
    # Ray back-end: custom resources an agent must hold to run this goal's turns
    # (`goal add --resource NAME=AMOUNT`); the local back-end ignores them.
    resources: dict[str, PositiveFloat] = Field(default_factory=dict)
    # The goal's own check of a `completed` (`goal add --done-check CMD`).
    done_check: DoneCheckSpec | None = None
    # Turns run in a git worktree of their own; a completed goal merges itself.
    worktree: WorktreeSpec | None = None
    auto_merge: bool = False
    # Accounts: the provider account the goal's turns run on (None: its host kind's
    # default account, the supervisor's environment), and its overrides of the account's
    # resume policy on a usage limit (None: the account's).
    account: str | None = None
    on_limit: Literal["wait", "gate", "stop"] | None = None
    max_limit_waits: Annotated[int, Field(ge=0)] | None = None
    # Hand-off (docs/work.md): the accounts, in order, a turn runs on while the goal's own
    # does not admit it (of any host kind); ``handoff`` False pins the goal to its own; at most
    # ``max_handoffs_per_day`` handed-off turns in any 24 hours (None: no cap).
    fallback_accounts: list[str] = Field(default_factory=list)
    handoff: bool = True
    max_handoffs_per_day: Annotated[int, Field(ge=0)] | None = DEFAULT_MAX_HANDOFFS_PER_DAY
    # Its host and done-check run inside bubblewrap, network through LoopX's proxy.
    sandbox: SandboxSpec | None = None
    created_at: UtcDatetime
    updated_at: UtcDatetime

    @field_validator("id")
    @classmethod
    def _safe_id(cls, value: str) -> str:
        return validate_goal_id(value)

    @field_validator("account")
    @classmethod
    def _safe_account(cls, value: str | None) -> str | None:
        if value is not None and not is_valid_goal_id(value):  # account names follow the same rule
            msg = f"account name {value!r}: letters, digits, '.', '_' or '-', at most 64"
            raise ValueError(msg)
        return value

    @field_validator("fallback_accounts")
    @classmethod
    def _safe_fallbacks(cls, value: list[str]) -> list[str]:
        for name in value:
            if not is_valid_goal_id(name):
                msg = (
                    f"fallback account name {name!r}: letters, digits, '.', '_' or '-', at most 64"
                )
                raise ValueError(msg)
        if len(set(value)) != len(value):
            msg = f"fallback accounts are named once each, got {value}"
            raise ValueError(msg)
        return value

    @field_validator("resources")
    @classmethod
    def _resource_names(cls, value: dict[str, float]) -> dict[str, float]:
        for name in value:
            if not name or not name.replace("_", "").replace("-", "").replace(".", "").isalnum():
                msg = f"resource names are letters, digits, '_', '-' or '.', got {name!r}"
                raise ValueError(msg)
        return value

    @field_validator("workdir")
    @classmethod
    def _absolute_workdir(cls, value: str) -> str:
        if not os.path.isabs(value):  # not Path(): runs for every goal an index loads
            msg = f"workdir must be an absolute path, got {value!r}"
            raise ValueError(msg)
        return value


class Registry(Record):
    """Every goal of a root, as read from the goal files (a view; not a file of its own)."""

    common_runtime_root: str | None = None
    goals: dict[str, Goal] = Field(default_factory=dict)

    @field_validator("goals")
    @classmethod
    def _keys_match_ids(cls, goals: dict[str, Goal]) -> dict[str, Goal]:
        for key, goal in goals.items():
            if key != goal.id:
                msg = f"goal stored under key {key!r} has id {goal.id!r}"
                raise ValueError(msg)
        return goals
