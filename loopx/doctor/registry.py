"""The registry check: ``registry.json`` (root-wide settings) parses, or is an old layout.

Each goal's policy (``goals/<id>/goal.json``) is checked with the goal
(:mod:`loopx.doctor.goalfiles`). The doctor is read-only: an old single-file
registry is reported, not migrated.
"""

from __future__ import annotations

import os

from loopx.doctor.findings import Checker, FindingCode, Severity, q
from loopx.errors import CorruptFileError, UnsafePathError
from loopx.registry.version import registry_version
from loopx.root.settings import SETTINGS_VERSION, RegistrySettings


def check_registry(doc: Checker) -> bool:
    """Check the root-wide settings file; True when it is an old single-file registry."""
    path = doc.layout.registry
    repair = (
        f"restore {q(path)} from a backup  (or fix the named field by hand: `loopx schema "
        "registry` prints the format; every goal's own files are intact)"
    )
    try:
        version = registry_version(path)
    except CorruptFileError as e:
        doc.add(Severity.ERROR, FindingCode.SCHEMA, path, e.problem, repair)
        return False
    except (UnsafePathError, OSError) as e:
        doc.add(Severity.ERROR, FindingCode.SCHEMA, path, f"cannot be read: {e}", repair)
        return False
    if version is not None and version < SETTINGS_VERSION:
        doc.add(
            Severity.WARNING,
            FindingCode.OLD_LAYOUT,
            path,
            "a single-file registry written by an older LoopX",
            f"loopx init --upgrade --root {q(doc.layout.root)}  (or any command opening it)",
        )
        return True
    doc.model(path, RegistrySettings, repair)
    return False


def goal_names(doc: Checker) -> list[str]:
    """The entries of goals/, sorted."""
    try:
        return sorted(os.listdir(doc.layout.goals_dir))
    except (FileNotFoundError, NotADirectoryError):
        return []
