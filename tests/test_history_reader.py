"""One read of a history file gives what the tail reader and the counter give by two."""

from __future__ import annotations

import os
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loopx.errors import CorruptFileError, UnsafePathError
from loopx.history.reader import (
    HistoryCounts,
    TailAndCounts,
    count_history,
    history_tail,
    tail_and_counts,
)
from loopx.storage.files import open_dir
from loopx.testing.status_fixtures import history_line
from loopx.turn.protocol import ResultKind

T0 = datetime(2026, 1, 1, tzinfo=UTC)

# A line of the file: a history record (short or long), a blank line, or bytes that are
# not a history record; read in blocks of a few lines, or of many.
line_kinds = st.sampled_from(["short", "short", "short", "long", "blank", "damaged"])


def _line(i: int, kind: str, result: ResultKind) -> bytes:
    if kind == "blank":
        return b"  "
    if kind == "damaged":
        return b'{"not": "a history line"}'
    summary = "x" * 1500 if kind == "long" else ""
    return (
        history_line(
            "g",
            i + 1,
            ended_at=T0 + timedelta(minutes=i),
            kind=result,
            summary=summary,
            epoch=i % 5 + 1,
        )
        .model_dump_json()
        .encode()
    )


def _both(goal_dir: Path, previous: HistoryCounts, block: int = 16 * 1024) -> TailAndCounts:
    fd = open_dir(str(goal_dir))
    try:
        return tail_and_counts(fd, str(goal_dir), previous, block=block)
    finally:
        os.close(fd)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kinds=st.lists(line_kinds, max_size=30),
    results=st.lists(st.sampled_from(list(ResultKind)), min_size=30, max_size=30),
    counted_upto=st.integers(min_value=0, max_value=30),
    torn=st.booleans(),
    block=st.integers(min_value=50, max_value=20_000),
)
def test_tail_and_counts_equal_the_two_readers(kinds, results, counted_upto, torn, block):
    """Any file (blank, damaged, long or torn lines), counted from any earlier point, reads the same."""
    with tempfile.TemporaryDirectory() as tmp:
        goal_dir = Path(tmp, "goals", "g")
        goal_dir.mkdir(parents=True)
        path = goal_dir / "history.jsonl"
        lines = [_line(i, kind, results[i]) + b"\n" for i, kind in enumerate(kinds)]
        path.write_bytes(b"".join(lines[:counted_upto]))
        previous = count_history(path, HistoryCounts())
        path.write_bytes(b"".join(lines) + (b'{"turn_key": "torn' if torn else b""))

        got = _both(goal_dir, previous, block)

        assert got.counts == count_history(path, previous)
        try:
            want = history_tail(path)
        except CorruptFileError as e:
            assert (got.tail, got.damage.message if got.damage else None) == ([], e.message)
        else:
            assert (got.tail, got.damage) == (want, None)


def test_a_history_shorter_than_its_counted_offset_is_recounted(tmp_path: Path):
    """A file cut below the counted offset (replaced) is counted afresh, not from the offset."""
    goal_dir = tmp_path / "goals" / "g"
    goal_dir.mkdir(parents=True)
    path = goal_dir / "history.jsonl"
    lines = [_line(i, "short", ResultKind.PROGRESS) + b"\n" for i in range(4)]
    path.write_bytes(b"".join(lines))
    previous = count_history(path, HistoryCounts())
    path.write_bytes(lines[0])

    got = _both(goal_dir, previous)

    assert (got.counts.lines, got.counts.offset, [h.seq for h in got.tail]) == (
        1,
        len(lines[0]),
        [1],
    )


def test_a_missing_history_reads_as_empty(tmp_path: Path):
    """No history file: no tail, zero counts."""
    goal_dir = tmp_path / "goals" / "g"
    goal_dir.mkdir(parents=True)
    assert _both(goal_dir, HistoryCounts()) == TailAndCounts([], HistoryCounts())


def test_a_symlinked_history_is_refused(tmp_path: Path):
    """A history file that is a symlink is not read through."""
    goal_dir = tmp_path / "goals" / "g"
    goal_dir.mkdir(parents=True)
    decoy = tmp_path / "decoy.jsonl"
    decoy.write_bytes(_line(0, "short", ResultKind.PROGRESS) + b"\n")
    (goal_dir / "history.jsonl").symlink_to(decoy)
    with pytest.raises(UnsafePathError, match="symlink"):
        _both(goal_dir, HistoryCounts())


def test_every_block_size_and_counted_point_give_the_same_tail(tmp_path: Path):
    """However the last block cuts the file and wherever counting stopped, the tail is whole."""
    goal_dir = tmp_path / "goals" / "g"
    goal_dir.mkdir(parents=True)
    path = goal_dir / "history.jsonl"
    lines = [_line(i, "short", ResultKind.PROGRESS) + b"\n" for i in range(12)]
    path.write_bytes(b"".join(lines))
    whole = history_tail(path)
    for upto in range(len(lines) + 1):
        path.write_bytes(b"".join(lines[:upto]))
        previous = count_history(path, HistoryCounts())
        path.write_bytes(b"".join(lines))
        for block in range(50, 6000, 37):
            got = _both(goal_dir, previous, block)
            assert (got.tail, got.counts) == (whole, count_history(path, previous)), (upto, block)
