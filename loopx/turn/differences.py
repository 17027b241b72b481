"""Differences between a goal's files on disk and the files replay rebuilt from its journals.

Each :class:`Difference` names the file (relative to the goal directory), the
field path or turn key, and both values; JSON documents are compared field by
field, JSON Lines files line by line keyed by ``turn_key`` (duplicates, extra,
missing and reordered lines each have a kind), run log markdown as text.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from enum import StrEnum
from typing import Any, Final

from pydantic import JsonValue

from loopx.errors import UnsafePathError
from loopx.model import Record
from loopx.root import Layout
from loopx.storage.files import read_bytes

_SHOWN_CHARS: Final = 300


class DifferenceKind(StrEnum):
    """How a file on disk disagrees with the replay."""

    DIFFERS = "differs"  # both have it; the values differ
    MISSING = "missing"  # the replay wrote it, the disk lacks it
    EXTRA = "extra"  # the disk has it, no journal explains it
    DUPLICATE = "duplicate"  # a keyed line appears more than once on disk
    ORDER = "order"  # the same lines, in another order than the turns
    UNREADABLE = "unreadable"  # the disk file is damaged (not JSON, not the schema)
    CHAIN = "chain"  # a journal's planned-from state disagrees with the replay before it


class Difference(Record):
    """One disagreement between the disk and the replay."""

    file: str  # relative to the goal directory: state.json, history.jsonl, runs/3.json, turns/...
    key: str  # field path, turn_key, or "" for the whole file
    kind: DifferenceKind
    disk: JsonValue = None
    replayed: JsonValue = None

    def line(self) -> str:
        """One human-readable line."""
        where = f"{self.file} {self.key}".strip()
        if self.kind is DifferenceKind.DIFFERS or self.kind is DifferenceKind.CHAIN:
            disk, replayed = _short(self.disk), _short(self.replayed)
            return f"{where}: {self.kind}: disk {disk} != replayed {replayed}"
        if self.kind is DifferenceKind.MISSING:
            return f"{where}: missing on disk (replayed {_short(self.replayed)})"
        if self.kind is DifferenceKind.EXTRA:
            return f"{where}: on disk but explained by no journal ({_short(self.disk)})"
        return f"{where}: {self.kind}: {_short(self.disk)}"


def _short(value: object) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 3] + "..."


def _json_diff(disk: object, replayed: object, path: str) -> Iterator[tuple[str, object, object]]:
    if isinstance(disk, dict) and isinstance(replayed, dict):
        for key in [*disk, *(k for k in replayed if k not in disk)]:
            yield from _json_diff(
                disk.get(key), replayed.get(key), f"{path}.{key}" if path else key
            )
    elif disk != replayed:
        yield path, disk, replayed


def json_lines(data: bytes) -> list[dict[str, Any]]:
    """Complete JSON lines (a torn last line is ignored, as every reader does)."""
    out = []
    for raw in data.split(b"\n")[:-1]:
        if raw.strip():
            obj = json.loads(raw)
            if not isinstance(obj, dict):
                raise ValueError("a line is not a JSON object")
            out.append(obj)
    return out


def _compare_lines(
    name: str, disk: list[dict[str, Any]], replayed: list[dict[str, Any]]
) -> list[Difference]:
    out: list[Difference] = []
    disk_keys = [str(d.get("turn_key")) for d in disk]
    want = {str(r["turn_key"]): r for r in replayed}
    seen: set[str] = set()
    for key, line in zip(disk_keys, disk, strict=True):
        if key in seen:
            out.append(Difference(file=name, key=key, kind=DifferenceKind.DUPLICATE, disk=line))
            continue
        seen.add(key)
        if key not in want:
            out.append(Difference(file=name, key=key, kind=DifferenceKind.EXTRA, disk=line))
            continue
        out += [
            Difference(file=name, key=f"{key}.{p}", kind=DifferenceKind.DIFFERS, disk=d, replayed=r)
            for p, d, r in _json_diff(line, want[key], "")
        ]
    out += [
        Difference(file=name, key=k, kind=DifferenceKind.MISSING, replayed=r)
        for k, r in want.items()
        if k not in seen
    ]
    common = [k for k in dict.fromkeys(disk_keys) if k in want]
    expected = [k for k in want if k in seen]
    if common != expected:
        out.append(
            Difference(file=name, key="", kind=DifferenceKind.ORDER, disk=common, replayed=expected)
        )
    return out


def _compare_file(  # noqa: PLR0911 - one return per way two files can differ
    name: str, disk: bytes | None, replayed: bytes | None
) -> list[Difference]:
    if disk is None and replayed is None:
        return []
    if disk is None:
        return [
            Difference(file=name, key="", kind=DifferenceKind.MISSING, replayed=_preview(replayed))
        ]
    if replayed is None:
        if name.endswith(".jsonl") and not disk.strip():
            return []  # an empty ledger and no ledger say the same
        return [Difference(file=name, key="", kind=DifferenceKind.EXTRA, disk=_preview(disk))]
    if name.endswith(".md"):
        if disk == replayed:
            return []
        return [
            Difference(
                file=name,
                key="",
                kind=DifferenceKind.DIFFERS,
                disk=_preview(disk),
                replayed=_preview(replayed),
            )
        ]
    try:
        if name.endswith(".jsonl"):
            return _compare_lines(name, json_lines(disk), json_lines(replayed))
        disk_doc = json.loads(disk)
    except (ValueError, UnicodeDecodeError) as e:
        return [Difference(file=name, key="", kind=DifferenceKind.UNREADABLE, disk=str(e))]
    return [
        Difference(file=name, key=p, kind=DifferenceKind.DIFFERS, disk=d, replayed=r)
        for p, d, r in _json_diff(disk_doc, json.loads(replayed), "")
        # No journal sets the time of a state no turn wrote (`goal add`, a gate): not a diff.
        if not (name == "state.json" and p == "updated_at" and r is None)
    ]


def _preview(data: bytes | None) -> str | None:
    if data is None:
        return None
    return data[:_SHOWN_CHARS].decode("utf-8", errors="replace")


def _disk_files(layout: Layout, goal_id: str) -> dict[str, bytes]:
    goal_dir = layout.goal_dir(goal_id)
    out: dict[str, bytes] = {}
    names = ["state.json", "history.jsonl", "quota.jsonl"]
    runs = layout.runs_dir(goal_id)
    if runs.is_dir() and not runs.is_symlink():
        names += [f"runs/{n}" for n in sorted(os.listdir(runs)) if not n.startswith(".")]
    for name in names:
        try:
            out[name] = read_bytes(goal_dir / name)
        except FileNotFoundError:
            continue
        except UnsafePathError as e:
            out[name] = f"<{e.message}>".encode()
    return out


def _seq_of(name: str) -> int | None:
    stem = name.removeprefix("runs/").split(".", 1)[0]
    return int(stem) if name.startswith("runs/") and stem.isdigit() else None


def without_folded(name: str, data: bytes, through: int, keep: set[str]) -> bytes:
    """A JSON Lines file's bytes without the lines of turns up to ``through`` (but ``keep``'s).

    Lines that are not JSON objects with a ``seq`` are left for the comparison to report.
    """
    if not name.endswith(".jsonl") or through <= 0:
        return data
    out = []
    for raw in data.split(b"\n")[:-1]:
        try:
            line = json.loads(raw)
        except ValueError:
            line = None
        if (
            isinstance(line, dict)
            and isinstance(line.get("seq"), int)
            and line["seq"] <= through
            and line.get("turn_key") not in keep
        ):
            continue
        out.append(raw + b"\n")
    return b"".join(out) + data[data.rfind(b"\n") + 1 :]


def compare_files(
    layout: Layout, goal_id: str, rebuilt: Mapping[str, bytes], *, folded_through: int = 0
) -> list[Difference]:
    """Every difference between the goal's files on disk and ``rebuilt`` (same relative names).

    ``folded_through``: the goal's checkpoint folds the turns up to this seq; what a
    gc has yet to remove of them (run logs, history and ledger lines) is no difference.
    """
    disk = _disk_files(layout, goal_id)
    if folded_through:
        keys = {str(line.get("turn_key")) for line in json_lines(rebuilt.get("quota.jsonl", b""))}
        disk = {
            name: without_folded(
                name, data, folded_through, keys if name == "quota.jsonl" else set()
            )
            for name, data in disk.items()
            if (_seq_of(name) or folded_through + 1) > folded_through
        }
    out: list[Difference] = []
    for name in sorted(set(disk) | set(rebuilt), key=file_order):
        out += _compare_file(name, disk.get(name), rebuilt.get(name))
    return out


def file_order(name: str) -> tuple[int, int, str]:
    """Sort key: state, history, ledger, then run logs by turn number."""
    top = ["state.json", "history.jsonl", "quota.jsonl"]
    if name in top:
        return (top.index(name), 0, name)
    stem = name.removeprefix("runs/").split(".", 1)[0]
    return (len(top), int(stem) if stem.isdigit() else 0, name)
