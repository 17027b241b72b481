"""Bulk registration: `loopx goal import FILE`, from JSON Lines or a batch plan.

A JSON Lines file holds one goal per line in the shape of an entry of
``loopx goal list --json``'s ``goals`` array; only ``id`` and ``objective``
are required, so ``loopx goal list --json | jq -c '.goals[]'`` is an import
file. A ``.toml`` file, or a JSON document with a ``goals`` array, is a batch
plan (:mod:`loopx.registry.plan`).

The whole file is checked before anything is written (every line valid, no
id twice, no registered goal with a different policy, and `goal add`'s checks
of each workdir and command host unless ``--no-check``). Writing is
idempotent: a goal registered with the same policy is skipped; a new goal's
file is created exclusively (a hard link of a finished temp file), so a
concurrent `goal add` of the same id either wins or loses, never mixes. One
``os.sync()`` at the end makes every new file durable.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, Final, Literal

from pydantic import Field, ValidationError

from loopx.errors import UsageError
from loopx.faults import fault_point
from loopx.model import Record
from loopx.process.pids import pid_held
from loopx.registry.catalog import goal_catalog, goal_file_fingerprint
from loopx.registry.checks import GoalSetupError, check_program, check_sandbox, check_workdir
from loopx.registry.goalrecords import Goal, HostKind
from loopx.registry.store import ensure_current, read_goal
from loopx.root import Layout
from loopx.root.hints import note_goal_changed
from loopx.storage.files import FILE_MODE, describe_validation_error, read_bytes

_TIMESTAMPS: Final = ("created_at", "updated_at")
_PLAN_SUFFIXES: Final = (".toml",)


class GoalImportError(UsageError):
    """An import file is malformed or conflicts with the registry; nothing was registered."""

    def __init__(self, path: Path, line: int | None, problem: str, hint: str | None = None) -> None:
        where = f"{path}:{line}" if line is not None else str(path)
        fix = f"{hint}; " if hint else ""
        super().__init__(
            f"import {where}: {problem}",
            hint=f"{fix}fix the file and run again; nothing was registered",
        )
        self.path, self.line, self.problem = path, line, problem


class ImportReport(Record):
    """``loopx goal import --json``."""

    schema_version: Literal[1] = 1
    source: str
    total: int  # goals in the file
    added: int  # newly registered
    unchanged: int  # already registered with the same policy
    # Each imported goal without a worktree that shares its workdir -> the others.
    shared_workdir: dict[str, list[str]] = Field(default_factory=dict)


def _same_policy(a: Goal, b: Goal) -> bool:
    return a.model_dump(exclude=set(_TIMESTAMPS)) == b.model_dump(exclude=set(_TIMESTAMPS))


def _jsonl_entries(path: Path, data: bytes) -> Iterator[tuple[int, dict[str, Any]]]:
    for number, raw in enumerate(data.split(b"\n"), start=1):
        if not raw.strip():
            continue
        try:
            entry = json.loads(raw)
        except ValueError as e:
            raise GoalImportError(path, number, f"not valid JSON: {e}") from e
        if not isinstance(entry, dict):
            raise GoalImportError(path, number, "expected a JSON object (one goal per line)")
        yield number, entry


def _goal_of(
    path: Path, number: int, entry: dict[str, Any], *, default_workdir: Path, now: datetime
) -> Goal:
    if "objective" not in entry:
        raise GoalImportError(path, number, "objective: a goal needs an objective")
    workdir = Path(str(entry.get("workdir") or default_workdir)).expanduser()
    if not workdir.is_absolute():
        workdir = path.parent / workdir  # relative to the import file, like a batch plan
    data = {
        "created_at": now,
        "updated_at": now,
        **entry,
        "workdir": str(workdir.resolve()),
    }
    try:
        return Goal.model_validate(data)
    except ValidationError as e:
        raise GoalImportError(path, number, describe_validation_error(e)) from e


def _plan_goals(path: Path, *, now: datetime) -> list[tuple[int | None, Goal]]:
    from loopx.registry.goals import build_goal  # noqa: PLC0415 - cycle: goals imports store
    from loopx.registry.plan import load_plan  # noqa: PLC0415 - only plans need it

    plan = load_plan(path)
    return [
        (
            None,
            build_goal(g.id, None, g.changes(path.parent), default_workdir=path.parent, now=now),
        )
        for g in plan.goals
    ]


def _is_plan(path: Path, data: bytes) -> bool:
    if path.suffix in _PLAN_SUFFIXES:
        return True
    with contextlib.suppress(ValueError):
        doc = json.loads(data)
        return isinstance(doc, dict) and isinstance(doc.get("goals"), list)
    return False


def read_import(
    path: Path, *, default_workdir: Path, now: datetime
) -> list[tuple[int | None, Goal]]:
    """Every goal of an import file with its line number, checked whole. Pure but for the read.

    Raises:
        GoalImportError: unreadable, a line at fault, or an id given twice.
        PlanError: a batch plan at fault.
    """
    try:
        data = read_bytes(path)
    except FileNotFoundError as e:
        raise GoalImportError(path, None, "the file does not exist") from e
    if _is_plan(path, data):
        return _plan_goals(path, now=now)
    goals: list[tuple[int | None, Goal]] = []
    seen: dict[str, int] = {}
    for number, entry in _jsonl_entries(path, data):
        goal = _goal_of(path, number, entry, default_workdir=default_workdir, now=now)
        if goal.id in seen:
            raise GoalImportError(
                path, number, f"goal {goal.id!r} is given twice (first on line {seen[goal.id]})"
            )
        seen[goal.id] = number
        goals.append((number, goal))
    if not goals:
        raise GoalImportError(path, None, "no goals in the file")
    return goals


def _setup_checks(goal: Goal) -> Iterator[tuple[tuple[str, ...], Callable[[], None]]]:
    """`goal add`'s checks of one goal, each with a key naming what it looks at."""
    workdir = Path(goal.workdir)
    yield ("workdir", goal.workdir), lambda: check_workdir(workdir)
    if goal.host.kind == HostKind.COMMAND and goal.host.argv:
        program = goal.host.argv[0]
        # A relative path is looked up in the workdir; a bare name on PATH.
        relative = "/" in program and not program.startswith("/")
        key = ("program", program, goal.workdir if relative else "")
        yield key, lambda: check_program(program, workdir)
    if goal.sandbox is not None:  # bubblewrap can run here (checked once per import)
        yield ("sandbox",), check_sandbox
    if goal.done_check is not None:  # the done-check's program, like a host's
        check_prog = goal.done_check.argv[0]
        relative = "/" in check_prog and not check_prog.startswith("/")
        key = ("done-check", check_prog, goal.workdir if relative else "")
        yield key, lambda: check_program(check_prog, workdir, role="done-check")


def check_import(source: Path, goals: list[tuple[int | None, Goal]]) -> None:
    """`goal add`'s checks for every goal of an import (:mod:`loopx.registry.checks`).

    Its workdir exists and a command host's program can be started. Each distinct workdir and program is checked once, so a file of 100,000
    goals sharing a few workdirs costs a few ``stat`` calls.

    Raises:
        GoalImportError: the first line whose workdir or program is at fault, with
            the check's hint.
    """
    verdicts: dict[tuple[str, ...], GoalSetupError | None] = {}
    for number, goal in goals:
        for key, check in _setup_checks(goal):
            if key not in verdicts:
                try:
                    check()
                    verdicts[key] = None
                except GoalSetupError as e:
                    verdicts[key] = e
            error = verdicts[key]
            if error is not None:
                raise GoalImportError(source, number, error.message, hint=error.hint)


def _create_exclusive(path: Path, data: bytes) -> bool:
    """Publish ``data`` at ``path`` only if nothing is there: whole or not at all."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, FILE_MODE)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    fault_point("goal_import:before_link")
    try:
        os.link(tmp, path)
    except FileExistsError:
        return False
    finally:
        os.unlink(tmp)
    return True


def _make_goal_dirs(layout: Layout, goal_id: str) -> Path:
    goal_dir = layout.goal_dir(goal_id)
    for directory in (goal_dir, layout.runs_dir(goal_id), layout.turns_dir(goal_id)):
        with contextlib.suppress(FileExistsError):
            os.mkdir(directory, 0o700)
    if goal_dir.is_symlink():  # never write through a planted link
        from loopx.errors import UnsafePathError  # noqa: PLC0415 - rare path

        raise UnsafePathError(goal_dir, "it is a symlink")
    _remove_dead_temps(goal_dir)
    return goal_dir


def _remove_dead_temps(goal_dir: Path) -> None:
    """Remove the goal file's temp files whose writer is dead; a live writer's stay.

    An import killed between temp file and link left ``.goal.json.<pid>.<hex>.tmp``
    that no later import removed.
    """
    prefix = ".goal.json."
    with contextlib.suppress(OSError):
        for name in os.listdir(goal_dir):
            parts = name.split(".")
            if not (name.startswith(prefix) and name.endswith(".tmp") and parts[-3].isdigit()):
                continue
            pid = int(parts[-3])
            if pid != os.getpid() and not pid_held(pid):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(goal_dir / name)


def import_goals(
    layout: Layout, source: Path, goals: list[tuple[int | None, Goal]]
) -> ImportReport:
    """Register ``goals`` (from :func:`read_import`): new ones added, identical ones skipped.

    Raises:
        GoalImportError: a goal is registered with a different policy (checked
            for every goal before any is written).
    """
    ensure_current(layout)
    new: list[Goal] = []
    for number, goal in goals:
        existing = read_goal(layout, goal.id)
        if existing is None:
            new.append(goal)
        elif not _same_policy(existing, goal):
            raise GoalImportError(
                source,
                number,
                f"goal {goal.id!r} is registered with a different policy; "
                f"change it with `loopx goal add {goal.id} --update ...` or drop the line",
            )
    os.makedirs(layout.goals_dir, mode=0o700, exist_ok=True)
    written: dict[str, tuple[Goal, tuple[int, int, int]]] = {}
    for goal in new:
        _make_goal_dirs(layout, goal.id)
        data = goal.model_dump_json(indent=2).encode() + b"\n"
        if _create_exclusive(layout.goal_file(goal.id), data):
            written[goal.id] = (goal, goal_file_fingerprint(layout, goal.id))
            note_goal_changed(layout, goal.id)
        else:
            raced = read_goal(layout, goal.id)
            if raced is None or not _same_policy(raced, goal):
                raise GoalImportError(
                    source, None, f"goal {goal.id!r} was registered differently meanwhile"
                )
    os.sync()  # one flush makes every new goal file durable
    # Leave the goal index current: the next command loads it instead of parsing every new file.
    catalog = goal_catalog(layout)
    catalog.adopt(written)
    catalog.refresh()
    return ImportReport(
        source=str(source), total=len(goals), added=len(written), unchanged=len(goals) - len(new)
    )
