"""Batch plans: the goals a headless run registers, read from JSON or TOML and checked whole."""

from __future__ import annotations

import json
import shlex
import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from loopx.donecheck import DoneCheckSpec
from loopx.errors import NotRegularFileError, UsageError
from loopx.ids import validate_goal_id
from loopx.model import Record
from loopx.registry.goalrecords import HostKind, HostKindName, HostSpec, WorktreeSpec
from loopx.registry.goals import GoalChanges
from loopx.registry.quota_policy import QuotaPolicy
from loopx.registry.worktree_spec import worktree_spec
from loopx.sandbox import SandboxSpec
from loopx.storage.files import read_bytes


class PlanError(UsageError):
    """A batch plan is malformed; nothing was registered."""

    def __init__(self, path: Path, where: str, problem: str) -> None:
        super().__init__(
            f"plan {path}: {where}: {problem}",
            hint="fix the plan and run again; nothing was registered",
        )
        self.path = path
        self.where = where
        self.problem = problem


class PlanGoal(Record):
    """One goal of a plan. ``workdir`` is relative to the plan file's directory."""

    id: str
    objective: Annotated[str, Field(min_length=1)]
    workdir: str | None = None
    host: str | list[str] | None = None  # a command line (split like a shell) or an argv list
    host_kind: HostKindName | None = None
    priority: int = 0
    quota: QuotaPolicy = Field(default_factory=QuotaPolicy)
    next_probe: str | None = None
    max_host_attempts: Annotated[int, Field(ge=1, le=100)] = 2
    # The goal's done-check, a command line (split like a shell) or an argv list.
    done_check: str | Annotated[list[str], Field(min_length=1)] | None = None
    done_check_timeout_s: Annotated[float, Field(gt=0)] | None = None
    done_check_every_turn: bool = False
    # A git worktree of its own, as `goal add --worktree` and its options give.
    worktree: bool = False
    base: str | None = None
    worktree_include: list[str] = Field(default_factory=list)
    worktree_dir: str | None = None  # relative to the plan file's directory
    auto_merge: bool = False
    # The account the goal's turns run on, and its overrides of the account's resume policy.
    account: str | None = None
    on_limit: Literal["wait", "gate", "stop"] | None = None
    max_limit_waits: Annotated[int, Field(ge=0)] | None = None
    # Hand-off (docs/work.md): accounts of any host kind its turns run on while its own does
    # not admit them; handoff false pins it to its own.
    fallback_accounts: list[str] = Field(default_factory=list)
    handoff: bool = True
    max_handoffs_per_day: Annotated[int, Field(ge=0)] | None = None  # None: the goal's default
    # Failed turns in a row after which the batch ends the goal as `failed` (paused in
    # the registry) instead of retrying it with backoff; None: retry (or --fail-fast's 1).
    max_failures: Annotated[int, Field(ge=1, le=1000)] | None = None
    # Run the host and the done-check in bubblewrap (docs/sandbox.md); `goal add --sandbox bwrap`.
    sandbox: SandboxSpec | None = None

    @field_validator("id")
    @classmethod
    def _safe_id(cls, value: str) -> str:
        return validate_goal_id(value)

    @model_validator(mode="after")
    def _names_a_host(self) -> PlanGoal:
        # A goal without a host used to run the demo host and report `completed`:
        # a false green. The demo host must be asked for by name.
        if not self.host and self.host_kind is None:
            msg = (
                'no host: add "host": "CMD ARGS" (or "host_kind": "codex", "claude", "gemini", '
                'or "demo" for the built-in demo host)'
            )
            raise ValueError(msg)
        if self.host_kind is HostKind.COMMAND and not self.host:
            msg = 'host_kind "command" needs "host": "CMD ARGS"'
            raise ValueError(msg)
        return self

    @field_validator("done_check")
    @classmethod
    def _check_splits(cls, value: str | list[str] | None) -> str | list[str] | None:
        if isinstance(value, str):
            try:
                words = shlex.split(value)
            except ValueError as e:
                msg = f"done_check {value!r} cannot be split: {e}"
                raise ValueError(msg) from e
            if not words:
                msg = 'done_check is empty: give a command, e.g. "pytest -q"'
                raise ValueError(msg)
        return value

    def host_spec(self) -> HostSpec:
        """The registry host of this goal."""
        argv = shlex.split(self.host) if isinstance(self.host, str) else list(self.host or [])
        return HostSpec(kind=self.host_kind or HostKind.COMMAND, argv=argv)

    def workdir_path(self, plan_dir: Path) -> Path:
        """The goal's workdir: ``workdir`` from the plan's directory, else ``work/<id>``."""
        return (plan_dir / self.workdir if self.workdir else plan_dir / "work" / self.id).resolve()

    def changes(self, plan_dir: Path) -> GoalChanges:
        """The registry changes that register this goal."""
        return GoalChanges(
            objective=self.objective,
            workdir=str(self.workdir_path(plan_dir)),
            host=self.host_spec(),
            priority=self.priority,
            next_probe=self.next_probe,
            max_host_attempts=self.max_host_attempts,
            quota=self.quota.model_dump(),
            done_check=self.done_check_spec(),
            worktree=self.worktree_spec(plan_dir),
            auto_merge=self.auto_merge or None,
            account=self.account,
            on_limit=self.on_limit,
            max_limit_waits=self.max_limit_waits,
            fallback_accounts=self.fallback_accounts or None,
            handoff=None if self.handoff else False,
            max_handoffs_per_day=self.max_handoffs_per_day,
            sandbox=self.sandbox,
        )

    def worktree_spec(self, plan_dir: Path) -> WorktreeSpec | None:
        """The goal's worktree, its repository and base checked now (None without one).

        Raises:
            WorktreeError: the workdir is not a repository's top folder, or no such base.
        """
        if not self.worktree:
            return None
        folder = None if self.worktree_dir is None else str(plan_dir / self.worktree_dir)
        return worktree_spec(
            self.workdir_path(plan_dir),
            base=self.base,
            include=self.worktree_include,
            folder=folder,
        )

    def done_check_spec(self) -> DoneCheckSpec | None:
        """The registry's done-check of this goal (None without one)."""
        if self.done_check is None:
            return None
        argv = shlex.split(self.done_check) if isinstance(self.done_check, str) else self.done_check
        spec = DoneCheckSpec(argv=argv, every_turn=self.done_check_every_turn)
        if self.done_check_timeout_s is not None:
            spec = spec.model_copy(update={"timeout_s": self.done_check_timeout_s})
        return spec


class BatchPlan(Record):
    """A batch plan file (JSON or TOML)."""

    schema_version: Literal[1] = 1
    goals: Annotated[list[PlanGoal], Field(min_length=1)]

    @field_validator("goals")
    @classmethod
    def _unique_ids(cls, goals: list[PlanGoal]) -> list[PlanGoal]:
        seen: set[str] = set()
        for goal in goals:
            if goal.id in seen:
                msg = f"goal id {goal.id!r} appears twice"
                raise ValueError(msg)
            seen.add(goal.id)
        return goals


PLAN_SUFFIXES = (".json", ".toml")


def _parse(path: Path, data: bytes) -> Any:  # noqa: ANN401 - the untyped edge, validated next
    if path.suffix == ".toml":
        try:
            return tomllib.loads(data.decode())
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
            raise PlanError(path, "TOML syntax", str(e)) from e
    try:
        return json.loads(data)
    except json.JSONDecodeError as e:
        raise PlanError(
            path, f"line {e.lineno} column {e.colno}", f"not valid JSON: {e.msg}"
        ) from e


def _where(raw: Any, loc: tuple[int | str, ...]) -> str:  # noqa: ANN401 - the untyped edge
    """Name the field at fault, with the goal's id when the path runs through a goal."""
    parts: list[str] = []
    for i, part in enumerate(loc):
        if isinstance(part, int) and i > 0 and loc[i - 1] == "goals":
            goal_id = None
            if (
                isinstance(raw, dict)
                and isinstance(raw.get("goals"), list)
                and part < len(raw["goals"])
            ):
                entry = raw["goals"][part]
                goal_id = entry.get("id") if isinstance(entry, dict) else None
            parts[-1] = f"goals[{part}]" + (f" (id {goal_id!r})" if goal_id else "")
        else:
            parts.append(str(part))
    return ".".join(parts) or "(top level)"


def load_plan(path: Path) -> BatchPlan:
    """Read and validate a whole plan before anything is registered.

    Raises:
        PlanError: unreadable, not JSON/TOML, or a field at fault (named with its goal).
    """
    if path.suffix not in PLAN_SUFFIXES:
        raise PlanError(
            path,
            "file",
            f"a {path.suffix or 'suffix-less'} plan is not read: write it as .json or .toml",
        )
    try:
        data = read_bytes(path)
    except FileNotFoundError as e:
        raise PlanError(path, "file", "does not exist") from e
    except IsADirectoryError as e:
        raise PlanError(path, "file", "is a directory; pass the plan file itself") from e
    except NotRegularFileError as e:
        raise PlanError(path, "file", f"is {e.kind}; pass the plan file itself") from e
    except OSError as e:
        raise PlanError(path, "file", f"cannot be read: {e.strerror}") from e
    raw = _parse(path, data)
    try:
        return BatchPlan.model_validate(raw)
    except ValidationError as e:
        first = e.errors()[0]
        raise PlanError(path, _where(raw, tuple(first["loc"])), first["msg"]) from e
