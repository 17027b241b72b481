"""Migrate a root written by LoopX 0.x: one ``registry.json`` holding every goal.

Under the registry's lock, in this order, each step safe to interrupt:

1. copy the old file to ``registry.v1.json`` (a backup for a human);
2. write every goal's ``goals/<id>/goal.json`` from the old file (not yet
   synced one by one: step 3 syncs them all at once);
3. ``os.sync()``, then replace ``registry.json`` by the settings alone. This
   rename is the commit point: before it the old file is the truth and a
   migration run again rewrites every goal file from it; after it the goal
   files are the truth and there is nothing left to migrate.

A process killed at any step leaves a root the next open migrates again
(idempotently) or finds migrated; no goal is lost or doubled.
"""

from __future__ import annotations

import os
from typing import Literal

from pydantic import Field

from loopx.faults import fault_point
from loopx.model import Record
from loopx.registry.goalrecords import Goal
from loopx.registry.version import registry_version
from loopx.root import Layout
from loopx.root.settings import SETTINGS_VERSION, RegistrySettings
from loopx.storage.files import (
    atomic_write_bytes,
    atomic_write_model,
    parse_model,
    read_bytes,
)
from loopx.storage.locks import locked

BACKUP_NAME = "registry.v1.json"


class RegistryV1(Record):
    """``registry.json`` as LoopX 0.x wrote it: every goal in one file."""

    schema_version: Literal[1] = 1
    common_runtime_root: str | None = None
    goals: dict[str, Goal] = Field(default_factory=dict)


class MigrationReport(Record):
    """What `loopx init --upgrade` (or the first open of an old root) did."""

    schema_version: Literal[1] = 1
    migrated: bool  # False: the root was already in the current layout
    goals: int  # goals moved into their goal files
    backup: str | None  # where the old registry file was copied


def migrate_registry(layout: Layout) -> MigrationReport:
    """Move an old single-file registry's goals into goal files; a no-op on a current root.

    Raises:
        CorruptFileError: the old registry is damaged (it is left as it is).
        NewerRootError: a newer LoopX wrote the registry.
    """
    path = layout.registry
    with locked(path):
        version = registry_version(path)
        if version is None or version == SETTINGS_VERSION:
            return MigrationReport(migrated=False, goals=0, backup=None)
        if version > SETTINGS_VERSION:
            from loopx.errors import NewerRootError  # noqa: PLC0415 - rare path

            raise NewerRootError(path, version, SETTINGS_VERSION)
        raw = read_bytes(path)
        old = parse_model(path, RegistryV1, raw)
        fault_point("migrate:start")
        backup = path.with_name(BACKUP_NAME)
        atomic_write_bytes(backup, raw, durable=False)
        fault_point("migrate:backup_written")
        for goal in old.goals.values():
            layout.ensure_goal_dirs(goal.id)
            atomic_write_model(layout.goal_file(goal.id), goal, durable=False, sync_dir=False)
            fault_point("migrate:goal_written")
        fault_point("migrate:goals_written")
        # One sync makes every goal file durable before the commit below.
        os.sync()
        atomic_write_model(path, RegistrySettings(common_runtime_root=old.common_runtime_root))
        fault_point("migrate:committed")
    return MigrationReport(migrated=True, goals=len(old.goals), backup=str(backup))
