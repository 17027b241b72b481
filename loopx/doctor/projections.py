"""Derived and set-aside files: the status cache, probe observations, quarantine/."""

from __future__ import annotations

import os
from pathlib import Path

from loopx.doctor.findings import Checker, FindingCode, Severity, q
from loopx.errors import CorruptFileError, LoopxError
from loopx.ids import is_valid_goal_id
from loopx.status.refresh import StatusIndex, StatusShard
from loopx.status.shards import pack_file, read_pack
from loopx.status.view import ProbeObservation
from loopx.storage.files import parse_model, read_bytes


def check_projections(doc: Checker) -> None:
    """The status cache's index and shards, and the stored probe observations."""
    clear = "loopx status --clear-cache  (a cache; rebuilt from the durable files)"
    doc.model(doc.layout.status_file, StatusIndex, clear, severity=Severity.WARNING)
    shards = doc.layout.projections_dir / "status.d"
    for name in sorted(os.listdir(shards)) if shards.is_dir() and not shards.is_symlink() else []:
        if name.endswith(".json") and not name.startswith("."):
            doc.model(shards / name, StatusShard, clear, severity=Severity.WARNING)
    pack = pack_file(doc.layout)
    if pack.is_file() and not pack.is_symlink():
        try:
            for shard, line in read_pack(doc.layout):
                parse_model(f"{pack} (shard {shard:02x})", StatusShard, line)
        except CorruptFileError as e:
            doc.add(Severity.WARNING, FindingCode.SCHEMA, pack, e.problem, clear)
        except (LoopxError, OSError) as e:
            doc.add(Severity.WARNING, FindingCode.SCHEMA, pack, f"cannot be read: {e}", clear)
    probes = doc.layout.projections_dir / "probes"
    for name in sorted(os.listdir(probes)) if probes.is_dir() and not probes.is_symlink() else []:
        if name.endswith(".json") and not name.startswith("."):
            path = probes / name
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
