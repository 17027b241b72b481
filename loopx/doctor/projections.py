"""Derived and set-aside files: the status cache, probe observations, quarantine/."""

from __future__ import annotations

import os
from pathlib import Path

from loopx.doctor.findings import Checker, FindingCode, Severity, listed_files, q
from loopx.errors import CorruptFileError, LoopxError
from loopx.ids import is_valid_goal_id
from loopx.quota.quick import SNAPSHOT_DIR
from loopx.quota.snapshot import QuotaSnapshot
from loopx.status.refresh import StatusIndex, StatusShard
from loopx.status.shards import pack_file, parse_pack_line, read_pack
from loopx.status.view import ProbeObservation
from loopx.storage.files import read_bytes


def check_projections(doc: Checker) -> None:
    """The status cache's index and shards, the stored quota decisions and probe observations."""
    layout = doc.layout
    clear = "loopx status --clear-cache  (a cache; rebuilt from the durable files)"
    doc.model(layout.status_file, StatusIndex, clear, severity=Severity.WARNING)
    for path in listed_files(layout.projections_dir / "status.d", ".json"):
        doc.model(path, StatusShard, clear, severity=Severity.WARNING)
    _check_pack(doc, clear)
    for path in listed_files(layout.projections_dir / SNAPSHOT_DIR, ".snapshot"):
        decide = f"rm {q(path)}  (a stored decision; `loopx quota should-run` decides again)"
        doc.model(path, QuotaSnapshot, decide, severity=Severity.WARNING)
    for path in listed_files(layout.projections_dir / "probes", ".json"):
        doc.model(
            path,
            ProbeObservation,
            f"rm {q(path)}  (rerun `loopx probe`)",
            severity=Severity.WARNING,
        )


def _check_pack(doc: Checker, repair: str) -> None:
    """Every line of the status cache's shard pack (``status.d/pack.jsonl``)."""
    pack = pack_file(doc.layout)
    if not pack.is_file() or pack.is_symlink():
        return
    try:
        for shard, line in read_pack(doc.layout):
            parse_pack_line(doc.layout, shard, line)
    except CorruptFileError as e:
        doc.add(Severity.WARNING, FindingCode.SCHEMA, pack, e.problem, repair)
    except (LoopxError, OSError) as e:
        doc.add(Severity.WARNING, FindingCode.SCHEMA, pack, f"cannot be read: {e}", repair)


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
