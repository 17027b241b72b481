"""Goal files: read and write one goal's policy (``goals/<id>/goal.json``) and the root's settings.

A change to one goal reads and writes that goal's file only, under that
file's lock, so writers of different goals never wait for each other and a
change costs the same at ten goals and at a hundred thousand. Every write
leaves a change hint (:func:`loopx.root.hints.note_goal_changed`) that
the goal index, the status cache and the agents' scheduling index follow.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path

from loopx.errors import CorruptFileError, GoalNotFoundError, NewerRootError
from loopx.registry.goalrecords import Goal
from loopx.registry.version import registry_version
from loopx.root import Layout
from loopx.root.hints import note_goal_changed
from loopx.root.settings import SETTINGS_VERSION, RegistrySettings
from loopx.storage.files import atomic_write_model, parse_model, read_bytes
from loopx.storage.locks import locked

# Registry files found current (not an old single-file registry) by this process.
_CURRENT: set[Path] = set()


def ensure_current(layout: Layout) -> None:
    """Migrate an old single-file registry on first open; refuse a root newer than this program.

    Checked once per process and registry file; cheap afterwards.

    Raises:
        NewerRootError: a newer LoopX wrote the registry.
        CorruptFileError: the registry is damaged.
    """
    if layout.registry in _CURRENT:
        return
    version = registry_version(layout.registry)
    if version is None:
        return  # nothing to migrate yet; look again next time
    if version > SETTINGS_VERSION:
        raise NewerRootError(layout.registry, version, SETTINGS_VERSION)
    if version < SETTINGS_VERSION:
        from loopx.registry.migrate import migrate_registry  # noqa: PLC0415 - once per old root

        migrate_registry(layout)
    _CURRENT.add(layout.registry)


def read_settings(layout: Layout) -> RegistrySettings:
    """The root-wide settings (defaults when ``registry.json`` is absent).

    Raises:
        NewerRootError: a newer LoopX wrote the registry.
        CorruptFileError: the file is damaged.
    """
    ensure_current(layout)
    try:
        return parse_model(layout.registry, RegistrySettings, read_bytes(layout.registry))
    except FileNotFoundError:
        return RegistrySettings()


def read_goal(layout: Layout, goal_id: str) -> Goal | None:
    """The goal's policy from its goal file, or None when it is not registered.

    Raises:
        InvalidGoalIdError: the id is not a safe path segment.
        CorruptFileError: the goal file is damaged.
    """
    ensure_current(layout)
    path = layout.goal_file(goal_id)
    try:
        goal = parse_model(path, Goal, read_bytes(path))
    except FileNotFoundError:
        return None
    if goal.id != goal_id:
        raise CorruptFileError(path, f"id: the file names goal {goal.id!r}, not {goal_id!r}")
    return goal


def update_goal(
    layout: Layout,
    goal_id: str,
    change: Callable[[Goal | None], Goal],
    *,
    create: bool = False,
) -> Goal:
    """Read-modify-write one goal's file under its lock; returns the new goal.

    ``change`` receives the current goal (None when unregistered) and returns
    the new one, or raises to change nothing. Without ``create`` a goal whose
    directory does not exist is not registered, and nothing is created.

    Raises:
        GoalNotFoundError: no such goal and ``change`` accepted None anyway.
        LoopxError: whatever ``change`` raises.
    """
    ensure_current(layout)
    path = layout.goal_file(goal_id)
    if create:
        layout.ensure_goal_dirs(goal_id)
    elif not path.parent.is_dir():
        change(None)
        raise GoalNotFoundError(goal_id, layout.registry)
    with locked(path):
        new = change(read_goal(layout, goal_id))
        if new.id != goal_id:
            msg = f"a change of goal {goal_id!r} returned goal {new.id!r}"
            raise ValueError(msg)
        atomic_write_model(path, new)
    note_goal_changed(layout, goal_id)
    return new


def write_goals(layout: Layout, goals: Iterable[Goal]) -> int:
    """Write many goal files at once (bulk import, fixtures); returns how many.

    Each file is written atomically under its lock but not fsynced one by
    one: one ``os.sync()`` at the end makes them all durable before this
    returns, which costs one flush instead of one per goal.
    """
    ensure_current(layout)
    count = 0
    for goal in goals:
        layout.ensure_goal_dirs(goal.id)
        path = layout.goal_file(goal.id)
        with locked(path):
            atomic_write_model(path, goal, durable=False, sync_dir=False)
        note_goal_changed(layout, goal.id)
        count += 1
    os.sync()
    return count
