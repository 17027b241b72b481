"""Goal management: register, change status, open and resolve gates."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError

from loopx.donecheck import DoneCheckSpec
from loopx.errors import (
    GoalExistsError,
    GoalNotFoundError,
    GoalStateError,
    InvalidPolicyError,
)
from loopx.ids import validate_goal_id
from loopx.model import Record
from loopx.registry.goalrecords import Goal, GoalStatus, HostSpec, WorktreeSpec
from loopx.registry.hostprogram import DEFAULT_PROGRAMS, require_program
from loopx.registry.quota_policy import QuotaPolicy
from loopx.registry.store import read_goal, update_goal
from loopx.root import Layout
from loopx.sandbox import SandboxSpec
from loopx.state import Gate, GoalState, HostSession, update_state
from loopx.storage.files import atomic_write_model, describe_validation_error


class GoalChanges(Record):
    """The fields a `goal add` names; None means "not given" (keep or default)."""

    objective: str | None = None
    workdir: str | None = None
    host: HostSpec | None = None
    priority: int | None = None
    next_probe: str | None = None
    max_host_attempts: int | None = None
    resources: dict[str, float] | None = None  # replaces all of the goal's resources when given
    quota: dict[str, Any] = Field(default_factory=dict)  # QuotaPolicy fields given
    done_check: DoneCheckSpec | None = None  # replaces the goal's check when given
    # `--worktree` (checked and its base recorded by loopx.registry.worktree_spec), `--auto-merge`.
    worktree: WorktreeSpec | None = None
    auto_merge: bool | None = None
    account: str | None = None  # the goal's account; "" moves it to the default
    on_limit: str | None = None  # its override of the account's --on-limit
    max_limit_waits: int | None = None  # its override of the account's --max-limit-waits
    fallback_accounts: list[str] | None = None  # replaces the goal's list when given
    handoff: bool | None = None  # False: `--no-handoff`, the goal stays on its own account
    max_handoffs_per_day: int | None = None  # -1: no cap
    sandbox: SandboxSpec | None = None  # replaces the goal's sandbox when given
    no_sandbox: bool = False  # `--sandbox none`: the goal runs unconfined again


def _validation_failure(e: ValidationError, *, prefix: str = "") -> InvalidPolicyError:
    first = e.errors()[0]
    loc = [str(p) for p in first["loc"]]
    field = prefix + ".".join(loc) if loc else prefix.rstrip(".") or "goal"
    problem = describe_validation_error(e).split(": ", 1)[-1]
    if first["type"] not in ("missing", "extra_forbidden"):
        problem += f" (got {first['input']!r})"
    if prefix == "quota." and loc and loc[0] in QuotaPolicy.model_fields:
        # Say what the field means, so the fix is obvious without the docs.
        description = QuotaPolicy.model_fields[loc[0]].description
        if description:
            problem += f"; it sets the {description}"
    return InvalidPolicyError(field, problem)


def _quota_policy(values: dict[str, Any]) -> QuotaPolicy:
    try:
        return QuotaPolicy.model_validate(values)
    except ValidationError as e:
        raise _validation_failure(e, prefix="quota.") from e


def build_goal(
    goal_id: str,
    existing: Goal | None,
    changes: GoalChanges,
    *,
    default_workdir: Path,
    now: datetime,
) -> Goal:
    """The goal ``changes`` make of ``existing`` (or of nothing). Pure.

    Raises:
        InvalidPolicyError: a field is out of range, or a new goal has no objective.
    """
    validate_goal_id(goal_id)
    given = changes.model_dump(exclude_none=True, exclude={"quota", "host", "no_sandbox"})
    if changes.no_sandbox:
        given["sandbox"] = None
    if changes.host is not None:
        given["host"] = changes.host
    if changes.workdir is not None:
        given["workdir"] = str(Path(changes.workdir).expanduser().resolve())
    if given.get("account") == "":
        given["account"] = None  # back to the host kind's default account
    if given.get("max_handoffs_per_day") == -1:
        given["max_handoffs_per_day"] = None  # no cap
    try:
        if existing is None:
            if changes.objective is None:
                raise InvalidPolicyError("objective", "a new goal needs --objective TEXT")
            quota = _quota_policy(changes.quota)
            return Goal.model_validate(
                {
                    "id": goal_id,
                    "workdir": str(default_workdir.resolve()),
                    "created_at": now,
                    "updated_at": now,
                    "quota": quota,
                    **given,
                }
            )
        quota = _quota_policy({**existing.quota.model_dump(), **changes.quota})
        return Goal.model_validate(
            {**existing.model_dump(), **given, "quota": quota, "updated_at": now}
        )
    except ValidationError as e:
        raise _validation_failure(e) from e


def add_goal(
    layout: Layout,
    goal_id: str,
    changes: GoalChanges,
    *,
    update: bool,
    default_workdir: Path,
    now: datetime,
    validate: Callable[[Goal], None] | None = None,
) -> Goal:
    """Register a goal, or with ``update`` change the named fields of an existing one.

    ``validate`` checks the goal as it would be written (its account exists and
    fits its host kind) and raises to write nothing.

    Raises:
        GoalExistsError: the id is registered and ``update`` is False.
        InvalidPolicyError: a field is invalid.
        HostMissingError: the changes name a codex/claude/gemini host whose program is not on PATH.
    """
    validate_goal_id(goal_id)
    if changes.host is not None and changes.host.kind in DEFAULT_PROGRAMS:
        # Fail now, not at the first turn hours later.
        require_program(changes.host)

    def change(existing: Goal | None) -> Goal:
        if existing is not None and not update:
            raise GoalExistsError(goal_id, layout.registry)
        goal = build_goal(goal_id, existing, changes, default_workdir=default_workdir, now=now)
        if validate is not None:
            validate(goal)
        return goal

    goal = update_goal(layout, goal_id, change, create=True)
    state_path = layout.state_file(goal_id)
    if not state_path.exists():
        atomic_write_model(state_path, GoalState(goal_id=goal_id, updated_at=now))
    return goal


def get_goal(layout: Layout, goal_id: str) -> Goal:
    """The registered goal ``goal_id``.

    Raises:
        GoalNotFoundError: no such goal.
    """
    validate_goal_id(goal_id)
    goal = read_goal(layout, goal_id)
    if goal is None:
        raise GoalNotFoundError(goal_id, layout.registry)
    return goal


def set_status(layout: Layout, goal_id: str, status: GoalStatus, *, now: datetime) -> Goal:
    """Set a goal's registry status (pause, resume, done).

    Raises:
        GoalNotFoundError: no such goal.
        GoalStateError: the goal is archived.
    """
    validate_goal_id(goal_id)

    def change(goal: Goal | None) -> Goal:
        if goal is None:
            raise GoalNotFoundError(goal_id, layout.registry)
        if goal.status is GoalStatus.ARCHIVED and status is not GoalStatus.ARCHIVED:
            raise GoalStateError(
                f"goal {goal_id!r} is archived; its files moved to {layout.archive_dir}",
                hint="register it again under a new id with `loopx goal add`",
            )
        return goal.model_copy(update={"status": status, "updated_at": now})

    return update_goal(layout, goal_id, change)


def open_gate(
    layout: Layout, goal_id: str, question: str, *, now: datetime, opened_by: str = "human"
) -> Gate:
    """Open a gate: the goal waits for a human's answer before any agent works on it.

    Raises:
        GoalNotFoundError: no such goal.
        InvalidPolicyError: the question is empty or too long.
    """
    get_goal(layout, goal_id)
    try:
        gate_probe = Gate(id=0, question=question, opened_at=now)
    except ValidationError as e:
        raise _validation_failure(e) from e
    opened: list[Gate] = []

    def change(state: GoalState) -> GoalState:
        next_id = max((g.id for g in state.gates), default=0) + 1
        gate = gate_probe.model_copy(update={"id": next_id, "opened_by": opened_by})
        opened.append(gate)
        return state.model_copy(update={"gates": [*state.gates, gate], "updated_at": now})

    update_state(layout, goal_id, change)
    return opened[-1]


def resolve_gate(
    layout: Layout, goal_id: str, answer: str, *, now: datetime, gate_id: int | None = None
) -> Gate:
    """Answer the oldest open gate (or ``gate_id``) of a goal.

    Raises:
        GoalNotFoundError: no such goal.
        GoalStateError: no gate is open (or ``gate_id`` is not an open gate).
    """
    get_goal(layout, goal_id)
    resolved: list[Gate] = []

    def change(state: GoalState) -> GoalState:
        candidates = [g for g in state.open_gates if gate_id is None or g.id == gate_id]
        if not candidates:
            which = f"gate {gate_id} is not open" if gate_id is not None else "no gate is open"
            raise GoalStateError(
                f"goal {goal_id!r}: {which}, nothing to resolve",
                hint=f"see open gates with `loopx goal show {goal_id}`",
            )
        target = candidates[0]
        done = target.model_copy(update={"answer": answer, "resolved_at": now})
        resolved.append(done)
        gates = [done if g.id == target.id else g for g in state.gates]
        return state.model_copy(update={"gates": gates, "updated_at": now})

    update_state(layout, goal_id, change)
    return resolved[-1]


def reset_session(layout: Layout, goal_id: str, *, now: datetime) -> HostSession | None:
    """Forget a goal's host CLI session so its next turn starts a fresh one.

    Returns:
        The session that was dropped, or None if there was none.

    Raises:
        GoalNotFoundError: no such goal.
    """
    get_goal(layout, goal_id)
    dropped: list[HostSession | None] = []

    def change(state: GoalState) -> GoalState:
        dropped.append(state.host_session)
        return state.model_copy(update={"host_session": None, "updated_at": now})

    update_state(layout, goal_id, change)
    return dropped[-1]
