"""`loopx init [--upgrade]`: create the runtime root and an empty registry, idempotently."""

from __future__ import annotations

from typing import Literal

from loopx.model import Record
from loopx.registry.catalog import init_registry
from loopx.registry.migrate import MigrationReport, migrate_registry
from loopx.root import ResolvedRoot, RootSource, open_root


class InitReport(Record):
    """`loopx init --json`: where the root is, why there, and whether the registry is new."""

    schema_version: Literal[1] = 1
    root: str
    registry: str
    root_source: RootSource
    registry_created: bool
    goals: int
    # `init --upgrade`: what moving an old single-file registry did (None without --upgrade).
    migration: MigrationReport | None = None


def initialise(where: ResolvedRoot, *, upgrade: bool = False) -> InitReport:
    """Create the root (0700) and, if missing, a registry; a second call changes nothing.

    With ``upgrade``, first move an old single-file registry's goals into
    their goal files (the first open of such a root does the same).
    """
    existed = where.registry.exists()
    layout = open_root(where, create=True)  # creating a root also writes its registry
    migration = migrate_registry(layout) if upgrade else None
    created, registry = init_registry(layout)
    created = created or not existed
    return InitReport(
        root=str(layout.root),
        registry=str(layout.registry),
        root_source=where.source,
        registry_created=created,
        goals=len(registry.goals),
        migration=migration,
    )
