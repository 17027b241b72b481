"""Derived and set-aside files: the status cache, probe observations, quarantine/."""

from __future__ import annotations

import os
from pathlib import Path

from loopx.doctor.findings import Checker, FindingCode, Severity, listed_files, q
from loopx.errors import LoopxError
from loopx.ids import is_valid_goal_id
from loopx.status.database import StatusStore
from loopx.status.view import ProbeObservation
from loopx.storage.files import read_bytes


def check_projections(doc: Checker) -> None:
    """The status database (in this host's cache directory) and the probe observations."""
    layout = doc.layout
    store = StatusStore(layout)
    problem = store.problem()
    if problem is not None:
        doc.add(
            Severity.WARNING,
            FindingCode.SCHEMA,
            store.path,
            problem,
            "loopx status --clear-cache  (a cache; rebuilt from the durable files)",
        )
    for path in listed_files(layout.projections_dir / "probes", ".json"):
        doc.model(
            path,
            ProbeObservation,
            f"rm {q(path)}  (rerun `loopx probe`)",
            severity=Severity.WARNING,
        )


def check_quarantine(doc: Checker) -> None:
    """Every file set aside in quarantine/, with its reason."""
    top = doc.layout.quarantine_dir
    if not top.is_dir() or top.is_symlink():
        return
    for dirpath, _dirs, names in os.walk(top, followlinks=False):
        for name in sorted(names):
            if name.endswith((".reason.json", ".reason")):
                continue
            path = Path(dirpath) / name
            reason = path.with_name(name + ".reason.json")
            why = ""
            if reason.is_file():
                try:
                    why = ": " + read_bytes(reason)[:400].decode("utf-8", "replace").replace(
                        "\n", " "
                    )
                except (OSError, LoopxError):
                    why = ""
            goal = Path(dirpath).name if Path(dirpath) != top else name.split("__", 1)[0]
            extra = f" {q(reason)}" if reason.is_file() else ""
            doc.add(
                Severity.WARNING,
                FindingCode.QUARANTINED,
                path,
                f"set aside for a human{why}",
                f"rm {q(path)}{extra}  (once you have inspected it; LoopX never reads it again)",
                goal if is_valid_goal_id(goal) else None,
            )
