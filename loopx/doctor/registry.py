"""The registry check: ``registry.json`` parses, and goals/ is not left without it."""

from __future__ import annotations

import os

from loopx.doctor.findings import Checker, FindingCode, Severity, q
from loopx.registry.model import Registry


def check_registry(doc: Checker) -> Registry | None:
    """``registry.json``, or its absence beside goal directories."""
    path = doc.layout.registry
    found = doc.model(
        path,
        Registry,
        f"restore {q(path)} from a backup  (or fix the named field by hand: `loopx schema "
        "registry` prints the format; every goal's own files are intact)",
    )
    if found is None and not path.exists() and goal_names(doc):
        doc.add(
            Severity.WARNING,
            FindingCode.MISSING_FILE,
            path,
            "the registry is missing but goals/ has goals",
            "restore it from a backup, or re-register each goal with `loopx goal add ID ...`",
        )
    return found if isinstance(found, Registry) else None


def goal_names(doc: Checker) -> list[str]:
    """The entries of goals/, sorted."""
    try:
        return sorted(os.listdir(doc.layout.goals_dir))
    except (FileNotFoundError, NotADirectoryError):
        return []
