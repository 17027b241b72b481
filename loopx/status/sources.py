"""Reading what the status projection needs from the runtime root, cheaply.

The shell around the pure :mod:`loopx.status.projection`: fingerprints of a goal's files,
history tails read from the end of the file, the quota window read backwards,
the quarantine listing, probe observations, the fleet, and the change-hint log
that lets a refresh skip the scan of unchanged goals.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Final

from pydantic import Field, ValidationError

from loopx.errors import CorruptFileError, LoopxError
from loopx.fleet import AgentHeartbeat, FleetRecord
from loopx.history.line import HistoryLine
from loopx.model import Record
from loopx.quota.ledger import SpendRecord
from loopx.registry.model import Goal
from loopx.root import Layout
from loopx.state import GoalState
from loopx.status.changes import changes_file, note_goal_changed
from loopx.status.projection import GoalInputs, ProbeObservation, SpendPoint
from loopx.storage.files import (
    atomic_write_model,
    ensure_dir,
    parse_model,
    read_bytes,
    read_model_or_none,
)
from loopx.turn.lease import Lease

HISTORY_TAIL: Final = 8  # lines of history the projection looks at (newest last)
MAX_WINDOW_RECORDS: Final = 100_000  # a quota window never needs more ledger lines
_BLOCK: Final = 16 * 1024
# Files of a goal directory whose (mtime_ns, size) make its fingerprint. The
# turns/ directory's mtime moves whenever a journal is created or rewritten.
FINGERPRINT_NAMES: Final = (
    "goal.json",
    "state.json",
    "lease.json",
    "history.jsonl",
    "quota.jsonl",
    "epoch",
    "turns",
)
PROBES_DIR: Final = "probes"

Fingerprint = tuple[int, ...]


# --- change hints (written by loopx.status.changes) -----------------------------------------------


@dataclass(frozen=True, slots=True)
class HintCursor:
    """Where a reader of the change log stopped: the file's inode and byte offset."""

    inode: int = 0
    offset: int = 0


def read_hints(layout: Layout, cursor: HintCursor) -> tuple[set[str] | None, HintCursor]:
    """Goal ids noted since ``cursor``; None when the log was replaced (rescan everything).

    The log is truncated by the refresher after a full scan once it grows past
    a megabyte; a new inode or a shorter file means hints may have been lost.
    """
    path = changes_file(layout)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return (set() if cursor.inode == 0 else None), HintCursor()
    try:
        st = os.fstat(fd)
        if cursor.inode not in (0, st.st_ino) or st.st_size < cursor.offset:
            return None, HintCursor(st.st_ino, st.st_size)
        end = st.st_size
        data = os.pread(fd, end - cursor.offset, cursor.offset) if end > cursor.offset else b""
    finally:
        os.close(fd)
    # Only whole lines count; a torn last line is read again next time.
    cut = data.rfind(b"\n") + 1
    ids = {line.decode(errors="replace") for line in data[:cut].split(b"\n") if line}
    return ids, HintCursor(st.st_ino, cursor.offset + cut)


def reset_hints(layout: Layout) -> HintCursor:
    """Start a fresh change log (after a full scan made the old hints moot)."""
    path = changes_file(layout)
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    return HintCursor()


# --- fingerprints ------------------------------------------------------------------------------


def stat_pair(path: str) -> tuple[int, int]:
    """``(mtime_ns, size)`` of a path, ``(0, -1)`` when absent."""
    try:
        st = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return 0, -1
    return st.st_mtime_ns, st.st_size


def goal_fingerprint(goal_dir: str) -> Fingerprint:
    """``(inode, mtime_ns, size)`` of each of the goal's status files, by one directory scan.

    The inode catches an atomic rewrite of the same size within one mtime tick
    (every atomic write renames a new inode into place). Missing files count
    as ``(0, 0, -1)``; a missing goal directory gives ``()``.
    """
    found: dict[str, tuple[int, int, int]] = {}
    try:
        with os.scandir(goal_dir) as entries:
            for entry in entries:
                if entry.name in FINGERPRINT_NAMES:
                    st = entry.stat(follow_symlinks=False)
                    found[entry.name] = (entry.inode(), st.st_mtime_ns, st.st_size)
    except FileNotFoundError:
        return ()
    out: list[int] = []
    for name in FINGERPRINT_NAMES:
        out.extend(found.get(name, (0, 0, -1)))
    return tuple(out)


# --- tails -------------------------------------------------------------------------------------


def iter_lines_backwards(path: Path, *, block: int = _BLOCK) -> Iterator[bytes]:
    """Complete lines of a file, newest first, read from the end in blocks.

    A last line without its newline is a torn write and is skipped.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return
    try:
        pos = os.fstat(fd).st_size
        carry = b""
        seen_newline = False
        while pos > 0:
            step = min(block, pos)
            pos -= step
            buf = os.pread(fd, step, pos) + carry
            if not seen_newline:
                nl = buf.rfind(b"\n")
                if nl < 0:
                    carry = b""  # still inside the torn tail
                    continue
                buf, seen_newline = buf[:nl], True
            lines = buf.split(b"\n")
            carry = lines[0]
            for line in reversed(lines[1:]):
                if line.strip():
                    yield line
        if seen_newline and carry.strip():
            yield carry
    finally:
        os.close(fd)


def history_tail(path: Path, want: int = HISTORY_TAIL) -> list[HistoryLine]:
    """The last ``want`` history lines, oldest first.

    Raises:
        CorruptFileError: one of those lines is not a history record.

    """
    out: list[HistoryLine] = []
    for line in iter_lines_backwards(path):
        try:
            out.append(HistoryLine.model_validate_json(line))
        except ValidationError as e:
            raise CorruptFileError(
                path, f"a line near the end is not a history record: {e.errors()[0]['msg']}"
            ) from e
        if len(out) >= want:
            break
    out.reverse()
    return out


def window_spend(path: Path, *, since: datetime) -> list[SpendPoint]:
    """Ledger records that ended after ``since``, read backwards until an older one.

    The ledger is appended in commit order, which is ``ended_at`` order up to a
    little clock skew between agents; a small margin keeps skewed records.

    Raises:
        CorruptFileError: a line in the window is not a spend record.

    """
    margin = since - timedelta(minutes=10)
    out: list[SpendPoint] = []
    for line in iter_lines_backwards(path):
        try:
            rec = SpendRecord.model_validate_json(line)
        except ValidationError as e:
            raise CorruptFileError(
                path, f"a line near the end is not a spend record: {e.errors()[0]['msg']}"
            ) from e
        if rec.ended_at < margin or len(out) >= MAX_WINDOW_RECORDS:
            break
        u = rec.usage
        out.append(
            SpendPoint(
                ended_at=rec.ended_at,
                wall_s=u.wall_s,
                cpu_s=u.cpu_s,
                tokens=u.tokens,
                cost_usd=u.cost_usd,
            )
        )
    out.reverse()
    return out


# --- counters ----------------------------------------------------------------------------------

# Byte patterns of model_dump_json's compact output. A pattern inside a JSON
# string would have its quotes escaped (\"), so it cannot match by accident.
KIND_PATTERNS: Final = {
    kind: f'"kind":"{kind}"'.encode()
    for kind in ("progress", "completed", "wait", "needs_human", "failed")
}
STATUS_PATTERNS: Final = {s: f'"status":"{s}"'.encode() for s in ("committed", "failed", "stopped")}
INTERRUPTED_PATTERN: Final = b'"failure":"host_interrupted"'


class HistoryCounts(Record):
    """Counts over a whole history file, kept incrementally by byte offset (for /metrics)."""

    offset: int = 0
    lines: int = 0
    kinds: dict[str, int] = Field(default_factory=dict)
    statuses: dict[str, int] = Field(default_factory=dict)
    interrupted: int = 0  # turns failed by recovery with host_interrupted
    max_epoch: int = 0


def count_history(path: Path, previous: HistoryCounts) -> HistoryCounts:
    """Counts extended by the lines appended since ``previous.offset`` (recounted if shrunk)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return HistoryCounts()
    try:
        size = os.fstat(fd).st_size
        base = previous if size >= previous.offset else HistoryCounts()
        data = os.pread(fd, size - base.offset, base.offset) if size > base.offset else b""
    finally:
        os.close(fd)
    cut = data.rfind(b"\n") + 1
    data = data[:cut]
    kinds = dict(base.kinds)
    for kind, pattern in KIND_PATTERNS.items():
        kinds[kind] = kinds.get(kind, 0) + data.count(pattern)
    statuses = dict(base.statuses)
    for status, pattern in STATUS_PATTERNS.items():
        statuses[status] = statuses.get(status, 0) + data.count(pattern)
    max_epoch = base.max_epoch
    if data:
        for line in reversed(data.split(b"\n")):
            if line.strip():
                with contextlib.suppress(ValueError, AttributeError, TypeError):
                    max_epoch = max(max_epoch, int(json.loads(line).get("epoch", 0)))
                break
    return HistoryCounts(
        offset=base.offset + cut,
        lines=base.lines + data.count(b"\n"),
        kinds=kinds,
        statuses=statuses,
        interrupted=base.interrupted + data.count(INTERRUPTED_PATTERN),
        max_epoch=max_epoch,
    )


# --- goals -------------------------------------------------------------------------------------


def _damage(path: Path, error: LoopxError | OSError) -> str:
    message = error.message if isinstance(error, LoopxError) else f"{path}: {error}"
    return message


def gather_goal(
    layout: Layout,
    goal: Goal,
    *,
    now: datetime,
    quarantined: tuple[str, ...] = (),
    probe: ProbeObservation | None = None,
) -> GoalInputs:
    """Read one goal's status inputs; a damaged file becomes a ``damage`` line, not an error."""
    damage: list[str] = []
    state: GoalState | None = None
    lease: Lease | None = None
    history: list[HistoryLine] = []
    spend: list[SpendPoint] = []
    try:
        state = read_model_or_none(layout.state_file(goal.id), GoalState)
    except (LoopxError, OSError) as e:
        damage.append(_damage(layout.state_file(goal.id), e))
    try:
        lease = read_model_or_none(layout.lease_file(goal.id), Lease)
    except (LoopxError, OSError) as e:
        damage.append(_damage(layout.lease_file(goal.id), e))
    try:
        history = history_tail(layout.history_file(goal.id))
    except (LoopxError, OSError) as e:
        damage.append(_damage(layout.history_file(goal.id), e))
    try:
        spend = window_spend(
            layout.quota_file(goal.id), since=now - timedelta(hours=goal.quota.window_hours)
        )
    except (LoopxError, OSError) as e:
        damage.append(_damage(layout.quota_file(goal.id), e))
    return GoalInputs(
        goal=goal,
        state=state,
        lease=lease,
        history=tuple(history),
        spend=tuple(spend),
        quarantined=quarantined,
        damage=tuple(damage),
        probe=probe,
    )


# --- quarantine, probes, fleet -----------------------------------------------------------------


def _is_quarantine_entry(name: str) -> bool:
    # Reason notes (recovery writes ``<file>.reason.json``), lock files and dotfiles
    # explain or guard entries; they are not entries themselves.
    return not (
        name.startswith(".")
        or name.endswith((".reason", ".reason.json", ".lock"))
        or name in {"reason", "reason.json"}
    )


def quarantine_fingerprint(layout: Layout) -> list[int]:
    """``quarantine/``'s mtime and each per-goal subdirectory's: moves into a subdirectory
    change only that subdirectory.
    """
    out = list(stat_pair(str(layout.quarantine_dir)))
    try:
        with os.scandir(layout.quarantine_dir) as entries:
            for entry in sorted(entries, key=lambda e: e.name):
                if entry.is_dir(follow_symlinks=False):
                    st = entry.stat(follow_symlinks=False)
                    out.extend((entry.inode(), st.st_mtime_ns))
    except FileNotFoundError:
        pass
    return out


def quarantine_listing(
    layout: Layout, goal_ids: set[str]
) -> tuple[dict[str, tuple[str, ...]], int]:
    """Quarantined entries by goal, and the total count.

    An entry belongs to a goal when it sits in ``quarantine/<goal_id>/`` (where
    recovery puts invalid journals) or is named ``<goal_id>__<anything>``;
    reason notes (``*.reason.json``, ``*.reason``) are not entries.
    """
    by_goal: dict[str, list[str]] = {}
    total = 0
    try:
        entries = sorted(os.scandir(layout.quarantine_dir), key=lambda e: e.name)
    except FileNotFoundError:
        return {}, 0
    for entry in entries:
        name = entry.name
        if not _is_quarantine_entry(name):
            continue
        if entry.is_dir(follow_symlinks=False):
            inner = sorted(n for n in os.listdir(entry.path) if _is_quarantine_entry(n))
            total += len(inner)
            if name in goal_ids:
                by_goal.setdefault(name, []).extend(inner)
            continue
        total += 1
        owner = name.split("__", 1)[0] if "__" in name else None
        if owner in goal_ids:
            by_goal.setdefault(owner, []).append(name)
    return {g: tuple(v) for g, v in by_goal.items()}, total


def probes_dir(layout: Layout) -> Path:
    """``projections/probes/``: the latest probe observation of each goal."""
    return layout.projections_dir / PROBES_DIR


def probe_file(layout: Layout, goal_id: str) -> Path:
    """``projections/probes/<goal_id>.json``."""
    return probes_dir(layout) / f"{goal_id}.json"


def write_probe(layout: Layout, observation: ProbeObservation) -> Path:
    """Store a probe observation and hint the status refresh."""
    ensure_dir(probes_dir(layout))
    path = probe_file(layout, observation.goal_id)
    atomic_write_model(path, observation)
    note_goal_changed(layout, observation.goal_id)
    return path


def read_probes(layout: Layout) -> dict[str, ProbeObservation]:
    """Every stored probe observation by goal id; damaged ones are skipped."""
    out: dict[str, ProbeObservation] = {}
    try:
        names = os.listdir(probes_dir(layout))
    except FileNotFoundError:
        return out
    for name in names:
        if not name.endswith(".json") or name.startswith("."):
            continue
        path = probes_dir(layout) / name
        with contextlib.suppress(LoopxError, OSError):
            obs = parse_model(path, ProbeObservation, read_bytes(path))
            out[obs.goal_id] = obs
    return out


def read_fleet(layout: Layout) -> tuple[FleetRecord | None, list[AgentHeartbeat]]:
    """``supervisor.json`` and the agent heartbeats; damaged files are skipped."""
    fleet: FleetRecord | None = None
    with contextlib.suppress(LoopxError, OSError):
        fleet = read_model_or_none(layout.supervisor_file, FleetRecord)
    beats: list[AgentHeartbeat] = []
    try:
        names = os.listdir(layout.agents_dir)
    except FileNotFoundError:
        names = []
    for name in sorted(names):
        if not name.endswith(".json") or name.startswith("."):
            continue
        with contextlib.suppress(LoopxError, OSError):
            beats.append(
                parse_model(
                    layout.agents_dir / name, AgentHeartbeat, read_bytes(layout.agents_dir / name)
                )
            )
    return fleet, beats
