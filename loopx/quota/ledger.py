"""The compute-quota ledger: one line per turn whose host ran (``goals/<id>/quota.jsonl``).

The ledger is the truth; ``goals/<id>/quota.agg.json`` is a cache of it that
keeps a quota decision's cost independent of how long the ledger is:

* it holds the minute buckets (:mod:`loopx.quota.window`) of the recent past, the
  all-time totals, and how much of the ledger it covers: the ledger's inode,
  the byte offset just after the last folded line, and that line's turn_key;
* a decision reads it, checks it still describes a prefix of the ledger
  (same inode, ledger at least that long, the line ending at the offset
  carries that turn_key), folds only the bytes after the offset, and writes
  it back atomically when something was folded;
* anything else (missing, damaged, another ledger, a window reaching before
  what it kept) rebuilds it from the ledger.

Crash safety: the aggregate is written (atomically) only after the ledger
line is durable, and it is never the source of truth. A crash between the
two leaves it describing a shorter prefix: stale, and caught up by the next
read. A torn last ledger line is never folded (only bytes up to the last
newline are), so it cannot be counted before it is complete.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Final, Literal

from pydantic import ValidationError

from loopx.errors import CorruptFileError, LoopxError
from loopx.faults import fault_point
from loopx.log import get_logger
from loopx.model import Record, UtcDatetime
from loopx.quota.aggregate import (
    AGGREGATE_NAME,
    SpendAggregate,
    covers_prefix,
    load_aggregate,
    write_aggregate,
)
from loopx.quota.window import (
    COLUMNS,
    BucketFold,
    SpendColumns,
    SpendTotals,
    WindowSpend,
    in_window,
    minute_of,
    window_of,
)
from loopx.root import Layout
from loopx.storage.dirs import ensure_dir, refuse_symlinked_parents
from loopx.storage.files import (
    describe_validation_error,
    open_at,
    open_dir,
    open_regular,
)
from loopx.storage.jsonl import append_record, read_records
from loopx.usage import Usage

log = get_logger(__name__)

# Buckets are kept this long before the oldest window asked for, so a caller
# whose clock reads slightly earlier than the last one is still served from
# the cache instead of forcing a rebuild.
PRUNE_SLACK: Final = timedelta(hours=1)
LEDGER_NAME: Final = "quota.jsonl"  # in the goal's directory (Layout.quota_file)
_CHUNK: Final = 1024 * 1024
_NO_BUCKETS: Final = SpendColumns()  # frozen, so shared
_NO_TOTALS: Final = SpendTotals()


class SpendRecord(Record):
    """What one turn spent, keyed by ``turn_key`` so a replayed spend is skipped."""

    schema_version: Literal[1] = 1
    turn_key: str
    goal_id: str
    seq: int
    usage: Usage
    started_at: UtcDatetime
    ended_at: UtcDatetime


# --- the ledger --------------------------------------------------------------------------------


def append_spend(layout: Layout, record: SpendRecord) -> bool:
    """Append one turn's spend to its goal's ledger; a replayed ``turn_key`` is skipped.

    The aggregate cache is caught up afterwards when it exists; if that fails
    (or the process dies first) it is only stale and the next read repairs it.

    Returns:
        True if the line was written, False if the turn's spend was already there.
    """
    ensure_dir(layout.goal_dir(record.goal_id))
    written = append_record(layout.quota_file(record.goal_id), record)
    log.debug("spend_appended", goal_id=record.goal_id, turn_key=record.turn_key, written=written)
    if written:
        # Crash tests die here: the line is durable, the cache not yet updated.
        fault_point("quota_spend_appended")
        try:
            _catch_up(layout, record.goal_id)
        except (LoopxError, OSError) as e:
            # The line is durable; the cache is merely stale and rebuilt on read.
            log.warning("quota_aggregate_not_updated", goal_id=record.goal_id, error=str(e))
    return written


def read_spend(layout: Layout, goal_id: str) -> list[SpendRecord]:
    """Every complete line of a goal's ledger, oldest first; [] when there is none.

    Raises:
        CorruptFileError: a complete line is not a spend record.
    """
    return read_records(layout.quota_file(goal_id), SpendRecord)


def window_spend(layout: Layout, goal_id: str, *, window_start: datetime) -> WindowSpend:
    """What ``goal_id`` spent in the window after ``window_start``, from the aggregate.

    The one reader of a goal's window spend: the quota decision and the status
    projection both call it. Reads only the ledger bytes the aggregate does
    not cover yet, and writes the aggregate back (atomically, best effort)
    when it changed.

    Raises:
        CorruptFileError: a ledger line is not a spend record of this goal.
        UnsafePathError: the goal's directory, ``goals/`` or the ledger is a symlink.
    """
    goal_dir = str(layout.goal_dir(goal_id))
    try:
        dir_fd = open_dir(goal_dir)
    except FileNotFoundError:
        return WindowSpend(window_start=window_start)
    try:
        return window_spend_at(dir_fd, goal_dir, goal_id, window_start=window_start)
    finally:
        os.close(dir_fd)


def window_spend_at(
    dir_fd: int, goal_dir: str, goal_id: str, *, window_start: datetime
) -> WindowSpend:
    """:func:`window_spend` of a goal whose directory ``goal_dir`` is open (:func:`open_dir`)."""
    buckets, lifetime = _spend_at(dir_fd, goal_dir, goal_id, window_start=window_start)
    return window_of(buckets, window_start=window_start, lifetime=lifetime)


def window_buckets_at(
    dir_fd: int, goal_dir: str, goal_id: str, *, window_start: datetime
) -> SpendColumns:
    """``window_spend_at(...).buckets``, without the sums (the status projection sums them itself)."""
    buckets, _ = _spend_at(dir_fd, goal_dir, goal_id, window_start=window_start)
    return in_window(buckets, window_start=window_start)


def _spend_at(
    dir_fd: int, goal_dir: str, goal_id: str, *, window_start: datetime
) -> tuple[SpendColumns, SpendTotals]:
    """The buckets reaching back at least to ``window_start``, and the lifetime totals."""
    ledger = f"{goal_dir}/{LEDGER_NAME}"
    try:
        fd = open_at(dir_fd, LEDGER_NAME, ledger)
    except FileNotFoundError:
        return _NO_BUCKETS, _NO_TOTALS
    wanted = minute_of(window_start - PRUNE_SLACK)
    try:
        cached = load_aggregate(dir_fd, goal_dir, goal_id)
        kept = cached.kept_minute if cached is not None else None
        if kept is not None and minute_of(window_start) < kept:
            log.debug("quota_aggregate_rebuild", goal_id=goal_id, why="window reaches before cache")
            cached = None
        st = os.fstat(fd)
        if (
            cached is not None
            and cached.ledger_offset == st.st_size
            and covers_prefix(fd, cached, st)
        ):
            # The usual case, nothing appended since: the buckets serve as they are. Those
            # a prune would drop ended before the window: summing a window skips them too.
            return cached.buckets, cached.lifetime
        fold, dirty = _fold_ledger(fd, ledger, goal_id, cached, kept_minute=wanted, st=st)
    finally:
        os.close(fd)
    if dirty is not None:
        try:
            write_aggregate(Path(goal_dir, AGGREGATE_NAME), dirty)
        except (LoopxError, OSError) as e:
            # Only a cache: the sum is right without it, and the next read retries.
            log.warning("quota_aggregate_not_written", goal_id=goal_id, error=str(e))
    fold.prune(wanted)
    return fold.columns(), fold.lifetime


def rebuild_aggregate(layout: Layout, goal_id: str, *, window_start: datetime) -> SpendAggregate:
    """Rebuild a goal's aggregate from its whole ledger, keeping what ``window_start`` needs.

    Raises:
        FileNotFoundError: the goal has no ledger.
        CorruptFileError: a ledger line is not a spend record of this goal.
    """
    ledger = layout.quota_file(goal_id)
    fd = _open_ledger(ledger)
    try:
        kept = minute_of(window_start - PRUNE_SLACK)
        _, agg = _fold_ledger(fd, ledger, goal_id, None, kept_minute=kept)
    finally:
        os.close(fd)
    assert agg is not None  # a rebuild always produces a fresh aggregate  # noqa: S101
    write_aggregate(layout.quota_aggregate_file(goal_id), agg)
    return agg


def refold_aggregate(layout: Layout, goal_id: str, *, window: timedelta) -> SpendAggregate | None:
    """Rebuild a goal's aggregate after its ledger was rewritten (gc's settle), on any clock.

    Keeps the buckets any window ending at or after the ledger's newest line
    needs (``window`` and :data:`PRUNE_SLACK` before it), so the decisions
    that follow read only the aggregate instead of each rebuilding it from the
    whole ledger: a cold decision's cost stays bounded by the window, not by
    how much of a goal's past retention keeps. Judged by the ledger's own
    times, not the caller's clock (gc may run on one ahead). The caller holds
    the goal's lease, so no turn appends meanwhile.

    Returns:
        The aggregate written, or None when the goal has no ledger.

    Raises:
        CorruptFileError: a ledger line is not a spend record of this goal.
    """
    ledger = layout.quota_file(goal_id)
    try:
        fd = _open_ledger(ledger)
    except FileNotFoundError:
        return None
    try:
        fold, agg = _fold_ledger(fd, ledger, goal_id, None, kept_minute=None)
    finally:
        os.close(fd)
    assert agg is not None  # a rebuild always produces a fresh aggregate  # noqa: S101
    ends = fold.cols[COLUMNS.index("last_end")]
    if ends:
        newest = datetime.fromtimestamp(max(ends), UTC)
        fold.prune(minute_of(newest - window - PRUNE_SLACK))
        agg = agg.model_copy(update={"kept_minute": fold.kept_minute, "buckets": fold.columns()})
    write_aggregate(layout.quota_aggregate_file(goal_id), agg)
    return agg


def _open_ledger(path: Path) -> int:
    refuse_symlinked_parents(path)
    return open_regular(path)


@dataclass(frozen=True, slots=True)
class _Line:
    end: int  # byte offset just after the line's newline
    record: SpendRecord


def _catch_up(layout: Layout, goal_id: str) -> None:
    """Fold new ledger lines into an existing, consistent aggregate; else leave it for a read."""
    goal_dir = str(layout.goal_dir(goal_id))
    dir_fd = open_dir(goal_dir)
    try:
        cached = load_aggregate(dir_fd, goal_dir, goal_id)
        if cached is None:
            return
        ledger = os.path.join(goal_dir, LEDGER_NAME)
        fd = open_at(dir_fd, LEDGER_NAME, ledger)
    finally:
        os.close(dir_fd)
    try:
        if not covers_prefix(fd, cached):
            return
        _, dirty = _fold_ledger(fd, ledger, goal_id, cached, kept_minute=cached.kept_minute)
    finally:
        os.close(fd)
    if dirty is not None:
        write_aggregate(Path(goal_dir, AGGREGATE_NAME), dirty)


def _fold_ledger(
    fd: int,
    path: Path | str,
    goal_id: str,
    cached: SpendAggregate | None,
    *,
    kept_minute: int | None,
    st: os.stat_result | None = None,
) -> tuple[BucketFold, SpendAggregate | None]:
    """Fold the ledger bytes ``cached`` does not cover (all of them without a usable cache).

    ``st`` is the ledger's fstat, if taken.

    Returns:
        The fold, and the aggregate to write back (None when nothing changed).
    """
    st = st if st is not None else os.fstat(fd)
    if cached is not None and not covers_prefix(fd, cached, st):
        # Debug, not info: a root copied with `cp -a` rebuilds every goal's once
        # (the aggregate names its ledger by inode), a line per goal that ran.
        log.debug("quota_aggregate_rebuild", goal_id=goal_id, why="cache is not a ledger prefix")
        cached = None
    if cached is None:
        fold = BucketFold(kept_minute=kept_minute)
        offset, last_key = 0, None
    else:
        fold = BucketFold(cached.buckets, kept_minute=cached.kept_minute, lifetime=cached.lifetime)
        offset, last_key = cached.ledger_offset, cached.last_turn_key
    folded = False
    for line in _lines_after(fd, path, offset, st.st_size):
        record = line.record
        if record.goal_id != goal_id:
            raise CorruptFileError(
                Path(path), f"the line ending at byte {line.end} belongs to goal {record.goal_id!r}"
            )
        usage = record.usage
        fold.add(
            record.ended_at,
            wall_s=usage.wall_s,
            cpu_s=usage.cpu_s,
            tokens=usage.tokens,
            cost_usd=usage.cost_usd,
        )
        offset, last_key, folded = line.end, record.turn_key, True
    if cached is not None and not folded:
        return fold, None
    if kept_minute is not None:
        fold.prune(kept_minute)
    agg = SpendAggregate(
        goal_id=goal_id,
        ledger_inode=st.st_ino,
        ledger_offset=offset,
        last_turn_key=last_key,
        kept_minute=fold.kept_minute,
        lifetime=fold.lifetime,
        buckets=fold.columns(),
    )
    return fold, agg


def _lines_after(fd: int, path: Path | str, offset: int, size: int) -> Iterator[_Line]:
    """The complete lines of ``[offset, size)``, parsed; a torn last line is left out."""
    pending = b""
    pos = offset
    while pos < size:
        chunk = os.pread(fd, min(_CHUNK, size - pos), pos)
        if not chunk:
            break
        start_of_pending = pos - len(pending)
        data = pending + chunk
        pos += len(chunk)
        cut = data.rfind(b"\n") + 1
        pending = data[cut:]
        line_start = start_of_pending
        for raw in data[:cut].split(b"\n")[:-1]:
            line_end = line_start + len(raw) + 1
            if raw.strip():
                yield _Line(line_end, _parse_line(path, raw, line_end))
            line_start = line_end


def _parse_line(path: Path | str, raw: bytes, end: int) -> SpendRecord:
    try:
        return SpendRecord.model_validate_json(raw)
    except ValidationError as e:
        raise CorruptFileError(
            Path(path), f"the line ending at byte {end}: {describe_validation_error(e)}"
        ) from e
