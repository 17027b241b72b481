"""The spend ledger and its aggregate cache: idempotent appends, incremental == full re-read."""

from __future__ import annotations

import json
import math
import os
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loopx.errors import CorruptFileError
from loopx.quota.aggregate import SpendAggregate
from loopx.quota.ledger import (
    SpendRecord,
    append_spend,
    read_spend,
    rebuild_aggregate,
    window_buckets_at,
    window_spend,
)
from loopx.root import Layout
from loopx.storage.files import atomic_write_bytes, open_dir
from loopx.usage import Usage

T0 = datetime(2025, 5, 1, tzinfo=UTC)
GOAL = "g1"


def record(i: int, ended_at: datetime, *, wall=10.0, cpu=2.0, tokens=5, cost=0.01, goal=GOAL):
    return SpendRecord(
        turn_key=f"{goal}-{i:06d}-1",
        goal_id=goal,
        seq=i,
        usage=Usage(wall_s=wall, cpu_s=cpu, input_tokens=tokens, output_tokens=1, cost_usd=cost),
        started_at=ended_at - timedelta(seconds=wall),
        ended_at=ended_at,
    )


def reference(
    records: list[SpendRecord], window_start: datetime
) -> tuple[float, float, int, float, int]:
    """The window's sums straight from the records, by the minute-bucket rule."""
    groups: dict[int, list[SpendRecord]] = {}
    for r in records:
        groups.setdefault(math.floor(r.ended_at.timestamp() / 60), []).append(r)
    inside = [r for g in groups.values() if max(x.ended_at for x in g) > window_start for r in g]
    return (
        math.fsum(r.usage.wall_s for r in inside),
        math.fsum(r.usage.cpu_s for r in inside),
        sum(r.usage.tokens for r in inside),
        math.fsum(r.usage.cost_usd for r in inside),
        len(inside),
    )


def sums(w) -> tuple[float, float, int, float, int]:
    return (w.wall_s, w.cpu_s, w.tokens, w.cost_usd, w.turns)


def close(a, b) -> bool:
    return all(math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-9) for x, y in zip(a, b, strict=True))


@pytest.fixture
def layout(tmp_path: Path) -> Layout:
    return Layout.at(tmp_path)


def agg_path(layout: Layout) -> Path:
    return layout.quota_aggregate_file(GOAL)


def read_agg(layout: Layout) -> SpendAggregate:
    return SpendAggregate.model_validate_json(agg_path(layout).read_bytes())


# --- the ledger --------------------------------------------------------------------------------


def test_replayed_spend_is_skipped(layout):
    """Appending the same turn_key twice writes one line and reports the skip."""
    r = record(1, T0)
    assert (append_spend(layout, r), append_spend(layout, r)) == (True, False)
    assert read_spend(layout, GOAL) == [r]


def test_read_spend_of_a_goal_without_ledger_is_empty(layout):
    """No ledger yet means no spend."""
    assert read_spend(layout, GOAL) == []


def test_window_spend_without_ledger_is_zero_and_writes_nothing(layout):
    """A goal that never ran spent nothing, and no cache file appears."""
    w = window_spend(layout, GOAL, window_start=T0)
    assert (sums(w), len(w.buckets)) == ((0.0, 0.0, 0, 0.0, 0), 0)
    assert not agg_path(layout).exists()


def test_window_counts_only_turns_that_ended_after_its_start(layout):
    """A turn that ended at or before the window start is outside it."""
    append_spend(layout, record(1, T0, wall=100))
    append_spend(layout, record(2, T0 + timedelta(minutes=5), wall=7))
    w = window_spend(layout, GOAL, window_start=T0)
    assert (w.wall_s, w.turns, w.lifetime.turns, w.lifetime.wall_s) == (7.0, 1, 2, 107.0)


def test_torn_last_line_is_not_counted(layout):
    """A half-written last line (a writer died) is ignored until a whole line follows."""
    append_spend(layout, record(1, T0 + timedelta(minutes=1)))
    with layout.quota_file(GOAL).open("ab") as f:
        f.write(record(2, T0 + timedelta(minutes=2)).model_dump_json().encode()[:40])
    w = window_spend(layout, GOAL, window_start=T0)
    assert w.turns == 1
    append_spend(layout, record(3, T0 + timedelta(minutes=3)))
    assert window_spend(layout, GOAL, window_start=T0).turns == 2
    assert [r.seq for r in read_spend(layout, GOAL)] == [1, 3]


def test_damaged_ledger_line_is_reported_with_its_place(layout):
    """A complete line that is not a spend record is reported, not skipped."""
    append_spend(layout, record(1, T0 + timedelta(minutes=1)))
    with layout.quota_file(GOAL).open("ab") as f:
        f.write(b'{"turn_key": "x"}\n')
    agg_path(layout).unlink(missing_ok=True)
    with pytest.raises(CorruptFileError, match=r"quota\.jsonl is damaged: the line ending at byte"):
        window_spend(layout, GOAL, window_start=T0)


def test_another_goals_line_is_damage(layout):
    """A spend record of another goal inside this goal's ledger is reported."""
    layout.ensure_goal_dirs(GOAL)
    layout.quota_file(GOAL).write_text(record(1, T0, goal="other").model_dump_json() + "\n")
    with pytest.raises(CorruptFileError, match="belongs to goal 'other'"):
        window_spend(layout, GOAL, window_start=T0 - timedelta(hours=1))


# --- the aggregate -----------------------------------------------------------------------------


def test_aggregate_covers_the_ledger_after_a_read(layout):
    """After a read the aggregate records the ledger's size, inode and last key."""
    for i in range(3):
        append_spend(layout, record(i, T0 + timedelta(minutes=i)))
    window_spend(layout, GOAL, window_start=T0 - timedelta(hours=1))
    agg = read_agg(layout)
    ledger = layout.quota_file(GOAL)
    assert (agg.ledger_offset, agg.ledger_inode, agg.last_turn_key, agg.lifetime.turns) == (
        ledger.stat().st_size,
        ledger.stat().st_ino,
        "g1-000002-1",
        3,
    )


def test_append_catches_an_existing_aggregate_up(layout):
    """Once the aggregate exists, an append folds its line into it at once."""
    append_spend(layout, record(1, T0))
    window_spend(layout, GOAL, window_start=T0 - timedelta(hours=1))
    append_spend(layout, record(2, T0 + timedelta(minutes=1)))
    agg = read_agg(layout)
    assert (agg.last_turn_key, agg.ledger_offset) == (
        "g1-000002-1",
        layout.quota_file(GOAL).stat().st_size,
    )


def test_aggregate_keeps_only_recent_buckets(layout):
    """Buckets older than the window (less a slack) are pruned, so the cache stays small."""
    for i in range(200):
        append_spend(layout, record(i, T0 + timedelta(minutes=10 * i)))
    now = T0 + timedelta(minutes=10 * 199)
    w = window_spend(layout, GOAL, window_start=now - timedelta(hours=2))
    agg = read_agg(layout)
    assert w.turns == 12  # ends at now-110 .. now, every 10 min
    assert len(agg.buckets) <= 2 * 6 + 6 + 1  # the window plus one hour of slack
    assert agg.lifetime.turns == 200


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda p: p.write_bytes(b"{not json"), id="not-json"),
        pytest.param(lambda p: p.write_bytes(b'{"schema_version": 1}'), id="schema"),
        pytest.param(lambda p: p.unlink(), id="missing"),
        pytest.param(
            lambda p: p.write_text(json.dumps({**json.loads(p.read_text()), "goal_id": "zz"})),
            id="other-goal",
        ),
        pytest.param(
            lambda p: p.write_text(
                json.dumps({**json.loads(p.read_text()), "ledger_offset": 10**9})
            ),
            id="offset-past-end",
        ),
        pytest.param(
            lambda p: p.write_text(json.dumps({**json.loads(p.read_text()), "ledger_offset": 7})),
            id="offset-mid-line",
        ),
        pytest.param(
            lambda p: p.write_text(
                json.dumps({**json.loads(p.read_text()), "last_turn_key": "nope"})
            ),
            id="key-mismatch",
        ),
        pytest.param(
            lambda p: p.write_text(json.dumps({**json.loads(p.read_text()), "ledger_inode": 1})),
            id="other-inode",
        ),
        pytest.param(
            lambda p: p.write_text(
                json.dumps({**json.loads(p.read_text()), "buckets": {}, "kept_minute": 2**40})
            ),
            id="kept-after-window",
        ),
    ],
)
def test_damaged_or_stale_aggregate_is_rebuilt(layout, damage):
    """Whatever happened to the cache, the window equals a full re-read and the cache is repaired."""
    records = [record(i, T0 + timedelta(minutes=3 * i), wall=i + 1.0) for i in range(20)]
    for r in records[:12]:
        append_spend(layout, r)
    start = T0 + timedelta(minutes=10)
    window_spend(layout, GOAL, window_start=start)
    for r in records[12:]:
        append_spend(layout, r)
    damage(agg_path(layout))
    w = window_spend(layout, GOAL, window_start=start)
    assert close(sums(w), reference(records, start))
    assert read_agg(layout).ledger_offset == layout.quota_file(GOAL).stat().st_size
    assert read_agg(layout).lifetime.turns == 20


def test_ledger_replaced_with_a_shorter_one_is_rebuilt(layout):
    """A ledger rewritten shorter than the cache's offset (e.g. by replay) is re-read."""
    records = [record(i, T0 + timedelta(minutes=i)) for i in range(6)]
    for r in records:
        append_spend(layout, r)
    window_spend(layout, GOAL, window_start=T0 - timedelta(hours=1))
    body = b"".join(r.model_dump_json().encode() + b"\n" for r in records[:2])
    atomic_write_bytes(layout.quota_file(GOAL), body)
    w = window_spend(layout, GOAL, window_start=T0 - timedelta(hours=1))
    assert (w.turns, w.lifetime.turns) == (2, 2)


def test_window_reaching_before_the_kept_buckets_rebuilds(layout):
    """Asking for an older window than the cache kept re-reads the ledger instead of undercounting."""
    records = [record(i, T0 + timedelta(hours=i)) for i in range(30)]
    for r in records:
        append_spend(layout, r)
    late = T0 + timedelta(hours=28)
    assert window_spend(layout, GOAL, window_start=late).turns == 1
    early = T0 + timedelta(hours=2)
    assert window_spend(layout, GOAL, window_start=early).turns == 27


def test_rebuild_aggregate_matches_incremental(layout):
    """The explicit rebuild produces the same aggregate as incremental folding."""
    for i in range(40):
        append_spend(layout, record(i, T0 + timedelta(seconds=17 * i), wall=0.1 * i))
        window_spend(layout, GOAL, window_start=T0)
    incremental = read_agg(layout)
    rebuilt = rebuild_aggregate(layout, GOAL, window_start=T0)
    assert rebuilt == incremental


# --- incremental == full re-read (property) ----------------------------------------------------

step = st.tuples(
    st.integers(min_value=0, max_value=5),  # records appended before this read
    st.integers(min_value=-30, max_value=120),  # minutes the read's window start moves
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    offsets=st.lists(st.integers(min_value=0, max_value=600 * 60), min_size=1, max_size=40),
    walls=st.lists(
        st.floats(min_value=0, max_value=500, allow_nan=False), min_size=40, max_size=40
    ),
    steps=st.lists(step, min_size=1, max_size=12),
    window_hours=st.sampled_from([0.5, 1.0, 3.0]),
)
def test_incremental_aggregate_equals_a_full_re_read(offsets, walls, steps, window_hours):
    """Reads interleaved with appends (times out of order, windows moving both ways) match a re-read."""
    with tempfile.TemporaryDirectory() as tmp:
        layout = Layout.at(Path(tmp))
        records = [
            record(i, T0 + timedelta(seconds=s), wall=walls[i]) for i, s in enumerate(offsets)
        ]
        pending = list(records)
        written: list[SpendRecord] = []
        now = T0
        for count, move in steps:
            for r in pending[:count]:
                append_spend(layout, r)
                written.append(r)
            pending = pending[count:]
            now += timedelta(minutes=move)
            start = now - timedelta(hours=window_hours)
            w = window_spend(layout, GOAL, window_start=start)
            assert close(sums(w), reference(written, start))
            assert w.lifetime.turns == len(written)
            assert w.buckets.last_end == sorted(w.buckets.last_end)
        if written:
            # The cache that is left behind equals one built from scratch.
            cached = window_spend(layout, GOAL, window_start=start)
            agg_path(layout).unlink()
            fresh = window_spend(layout, GOAL, window_start=start)
            assert cached == fresh


@pytest.mark.parametrize("late_minutes", [0, 30, 90, 60 * 30])
def test_window_buckets_are_the_window_spends_buckets(layout, late_minutes):
    """What the status projection reads is window_spend's buckets, from a current cache or not."""
    for i in range(6):
        append_spend(layout, record(i, T0 + timedelta(minutes=20 * i)))
    start = T0 + timedelta(minutes=late_minutes)
    goal_dir = str(layout.goal_dir(GOAL))
    fd = open_dir(goal_dir)
    try:
        buckets = window_buckets_at(fd, goal_dir, GOAL, window_start=start)
    finally:
        os.close(fd)
    assert buckets == window_spend(layout, GOAL, window_start=start).buckets
    assert buckets.last_end == [
        r.ended_at.timestamp() for r in read_spend(layout, GOAL) if r.ended_at > start
    ]
