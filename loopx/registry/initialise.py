"""`loopx init [--upgrade]`: create the runtime root and an empty registry, idempotently."""

from __future__ import annotations

from typing import Literal

from loopx.model import Record
from loopx.registry.catalog import init_registry
from loopx.registry.migrate import MigrationReport, migrate_registry
from loopx.registry.store import read_settings
from loopx.root import Layout, ResolvedRoot, RootSource, open_root
from loopx.root.settings import RegistrySettings
from loopx.sandbox import SandboxOptions, SandboxSpec, sandbox_spec, unavailable
from loopx.storage.files import atomic_write_model


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
    # The root's default sandbox of goals added without one (`init --sandbox bwrap`).
    sandbox: SandboxSpec | None = None


def initialise(
    where: ResolvedRoot, *, upgrade: bool = False, sandbox: SandboxOptions | None = None
) -> InitReport:
    """Create the root (0700) and, if missing, a registry; a second call changes nothing.

    With ``upgrade``, first move an old single-file registry's goals into
    their goal files (the first open of such a root does the same). With
    ``sandbox`` options, set (or with ``none`` clear) the root's default sandbox.

    Raises:
        SandboxUnavailableError: ``--sandbox bwrap`` where bubblewrap cannot run.
        InvalidPolicyError: a sandbox option without a sandbox, or out of range.
    """
    existed = where.registry.exists()
    layout = open_root(where, create=True)  # creating a root also writes its registry
    migration = migrate_registry(layout) if upgrade else None
    created, registry = init_registry(layout)
    created = created or not existed
    settings = read_settings(layout)
    if sandbox is not None and any(v is not None for v in sandbox):
        settings = _with_sandbox(layout, settings, sandbox)
    return InitReport(
        root=str(layout.root),
        registry=str(layout.registry),
        root_source=where.source,
        registry_created=created,
        goals=len(registry.goals),
        migration=migration,
        sandbox=settings.sandbox,
    )


def _with_sandbox(
    layout: Layout, settings: RegistrySettings, options: SandboxOptions
) -> RegistrySettings:
    """Write the root's default sandbox into ``registry.json``; the settings as written."""
    box = sandbox_spec(options, settings.sandbox)
    if box is not None and options.kind == "bwrap":
        refused = unavailable()
        if refused is not None:
            raise refused
    changed = settings.model_copy(update={"sandbox": box})
    atomic_write_model(layout.registry, changed)
    return changed
