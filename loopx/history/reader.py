"""Every read of a goal's ``history.jsonl``.

The tail read from the end, the newest line, the whole file, and counters
kept incrementally by byte offset.

Readers never see a torn last line: only bytes up to the last newline count.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from pydantic import Field, ValidationError

from loopx.errors import CorruptFileError
from loopx.model import Record, trusted
from loopx.root import Layout
from loopx.storage.files import open_at
from loopx.storage.jsonl import read_records
from loopx.turn.historyline import HistoryLine

HISTORY_TAIL: Final = 8  # lines of history the status projection looks at (newest last)
HISTORY_NAME: Final = "history.jsonl"  # in the goal's directory (Layout.history_file)
_BLOCK: Final = 16 * 1024


def iter_lines_backwards(path: Path, *, block: int = _BLOCK) -> Iterator[bytes]:
    """Complete lines of a file, newest first, read from the end in blocks.

    A last line without its newline is a torn write and is skipped.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return
    try:
        yield from _lines_backwards(fd, block)
    finally:
        os.close(fd)


def _lines_backwards(fd: int, block: int = _BLOCK) -> Iterator[bytes]:
    """:func:`iter_lines_backwards` of an open file."""
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


def history_tail(path: Path, want: int = HISTORY_TAIL) -> list[HistoryLine]:
    """The last ``want`` history lines, oldest first.

    Raises:
        CorruptFileError: one of those lines is not a history record.

    """
    return _parsed_tail(iter_lines_backwards(path), path, want)


def _parsed_tail(newest_first: Iterable[bytes], path: Path | str, want: int) -> list[HistoryLine]:
    """The first ``want`` of ``newest_first`` parsed, oldest first."""
    out: list[HistoryLine] = []
    for line in newest_first:
        try:
            out.append(HistoryLine.model_validate_json(line))
        except ValidationError as e:
            raise CorruptFileError(
                Path(path), f"a line near the end is not a history record: {e.errors()[0]['msg']}"
            ) from e
        if len(out) >= want:
            break
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
    return _extended(base, data[: data.rfind(b"\n") + 1], newest=None)


def _extended(base: HistoryCounts, data: bytes, *, newest: HistoryLine | None) -> HistoryCounts:
    """``base`` plus the complete lines ``data`` (the file's bytes from ``base.offset`` on).

    ``newest``: the file's last line, parsed already (else its epoch is read here).
    """
    kinds = dict(base.kinds)
    for kind, pattern in KIND_PATTERNS.items():
        kinds[kind] = kinds.get(kind, 0) + data.count(pattern)
    statuses = dict(base.statuses)
    for status, pattern in STATUS_PATTERNS.items():
        statuses[status] = statuses.get(status, 0) + data.count(pattern)
    max_epoch = base.max_epoch
    if newest is not None and data and not data.isspace():  # data's last line is the file's
        max_epoch = max(max_epoch, newest.epoch)
    elif data:
        for line in reversed(data.split(b"\n")):
            if line.strip():
                with contextlib.suppress(ValueError, AttributeError, TypeError):
                    max_epoch = max(max_epoch, int(json.loads(line).get("epoch", 0)))
                break
    # Ints and fresh dicts of ints, each of its field's type: built without validating them.
    return trusted(
        HistoryCounts,
        {
            "offset": base.offset + len(data),
            "lines": base.lines + data.count(b"\n"),
            "kinds": kinds,
            "statuses": statuses,
            "interrupted": base.interrupted + data.count(INTERRUPTED_PATTERN),
            "max_epoch": max_epoch,
        },
    )


# --- both, by one read -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TailAndCounts:
    """What the status cache reads of a history file: the tail, the counts, and any damage."""

    tail: list[HistoryLine]  # oldest first; empty when damaged
    counts: HistoryCounts
    damage: CorruptFileError | None = None  # a line of the tail is not a history record


def tail_and_counts(
    dir_fd: int,
    goal_dir: str,
    previous: HistoryCounts,
    want: int = HISTORY_TAIL,
    *,
    block: int = _BLOCK,
) -> TailAndCounts:
    """:func:`history_tail` and :func:`count_history` by one read, in an open goal directory.

    ``dir_fd`` is ``goal_dir`` opened by :func:`~loopx.storage.files.open_dir`.
    One ``pread`` covers both the bytes appended since ``previous`` and the
    last block (on a cold cache: the whole file, read once instead of twice).
    The counts are kept when the tail is damaged: they need no parse.

    Raises:
        UnsafePathError: the history file is a symlink.
    """
    path = f"{goal_dir}/{HISTORY_NAME}"
    try:
        fd = open_at(dir_fd, HISTORY_NAME, path)
    except FileNotFoundError:
        return TailAndCounts([], HistoryCounts())
    try:
        return _tail_and_counts(fd, path, previous, want, block)
    finally:
        os.close(fd)


def _tail_and_counts(
    fd: int, path: str, previous: HistoryCounts, want: int, block: int
) -> TailAndCounts:
    size = os.fstat(fd).st_size
    base = previous if size >= previous.offset else HistoryCounts()
    start = min(base.offset, max(0, size - block))
    data = os.pread(fd, size - start, start) if size > start else b""
    # Neither slice copies in the usual case: a file ends with a newline, a cold read starts at 0.
    complete = data[: data.rfind(b"\n") + 1]
    counted = complete[base.offset - start :]
    # The tail is looked for in the last block only (a cold read may hold the whole file): its
    # last `want` lines, and before them the rest, when there is more.
    tail_from = max(0, len(complete) - block)
    parts = complete[tail_from:-1].rsplit(b"\n", want) if complete else []
    more_before = len(parts) > want or start + tail_from > 0
    # What precedes the last `want` lines is not a line: several lines, or one cut by the
    # block's start (a counted offset is just after a newline: a line starts there).
    cut_before = len(parts) > want or start + tail_from not in (0, base.offset)
    newest_first = [line for line in reversed(parts[1:] if cut_before else parts) if line.strip()]
    newest: HistoryLine | None = None
    try:
        if len(newest_first) < want and more_before:  # blank lines, or a long tail
            tail = _parsed_tail(_lines_backwards(fd, block), path, want)
        else:
            tail = _parsed_tail(newest_first, path, want)
            newest = tail[-1] if tail else None
    except CorruptFileError as e:
        return TailAndCounts([], _extended(base, counted, newest=None), e)
    return TailAndCounts(tail, _extended(base, counted, newest=newest))


def newest_lines(path: Path, limit: int) -> Iterator[HistoryLine | bytes]:
    """Up to ``limit`` complete lines, newest first, each parsed or kept raw.

    A line that is not a history record comes back as its bytes, so a caller
    can show the damage instead of failing.
    """
    for count, raw in enumerate(iter_lines_backwards(path)):
        if count >= limit:
            return
        try:
            yield HistoryLine.model_validate_json(raw)
        except ValidationError:
            yield raw


def last_history_line(path: Path) -> HistoryLine | None:
    """The newest complete line of a goal's ``history.jsonl``, or None (none, or damaged)."""
    try:
        tail = history_tail(path, 1)
    except CorruptFileError:
        return None
    return tail[-1] if tail else None


def read_history(layout: Layout, goal_id: str) -> list[HistoryLine]:
    """Every complete line of a goal's history, oldest first; [] when there is none.

    Raises:
        CorruptFileError: a complete line is not a history record.
    """
    return read_records(layout.history_file(goal_id), HistoryLine)
