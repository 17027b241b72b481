"""``registry.json``: the root's settings file, whose existence marks an initialised root.

Below :mod:`loopx.root`, which creates it when it initialises a root, and the
registry, which reads and migrates it; it takes paths, not the root's layout.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final, Literal

from loopx.model import Record
from loopx.sandbox import SandboxSpec
from loopx.storage.dirs import fsync_dir
from loopx.storage.files import atomic_write_model

SETTINGS_VERSION: Final = 2  # RegistrySettings.schema_version; 1 held every goal


class RegistrySettings(Record):
    """``registry.json``: root-wide settings only; each goal's policy is in ``goals/<id>/goal.json``.

    Version 1 of this file held every goal; :mod:`loopx.registry.migrate`
    moves such a file's goals into their goal files.
    """

    schema_version: Literal[2] = 2
    common_runtime_root: str | None = None
    # The sandbox a goal added without one gets (`loopx init --sandbox bwrap`; docs/sandbox.md).
    sandbox: SandboxSpec | None = None


def create_settings(registry: Path, root: Path) -> bool:
    """Write an empty settings file at ``registry`` if there is none; True when written.

    A registry outside the root names the root (``common_runtime_root``,
    relative to the registry file) so that ``--registry`` alone finds it. An
    existing file, even an old single-file registry, is left as it is. The
    file is written aside and hard-linked into place, so it appears whole or
    not at all, and without the registry's lock: no goal write ever takes it.
    """
    if registry.exists():
        return False
    common = None
    if registry.parent != root:
        common = os.path.relpath(root, registry.parent)
    settings = RegistrySettings(common_runtime_root=common)
    tmp = registry.with_name(f".{registry.name}.{os.getpid()}.{os.urandom(4).hex()}")
    atomic_write_model(tmp, settings)
    try:
        os.link(tmp, registry)
    except FileExistsError:
        return False
    finally:
        tmp.unlink()
    fsync_dir(registry.parent)
    return True
