"""A cold status refresh shares the reading with a forked worker (StatusCache._reproject_all)."""

from __future__ import annotations

from loopx.faults import FAULT_ENV
from loopx.model import utcnow
from loopx.status.cache import StatusCache
from loopx.status.current import clear_status_cache
from loopx.status.shards import shard_dir
from loopx.testing.status_fixtures import (
    make_goal,
    open_gate_state,
    register_goals,
    seed_goal,
    write_lease,
    write_state,
)


def seeded(layout) -> None:
    """Goals that ran (one gated, one leased) and goals that never did."""
    now = utcnow()
    ran = [seed_goal(layout, f"r{i}", now=now, history=3, workdir=layout.root) for i in range(8)]
    unrun = [make_goal(f"u{i}", now=now, workdir=layout.root) for i in range(5)]
    for goal in unrun:
        layout.ensure_goal_dirs(goal.id)
    register_goals(layout, [*ran, *unrun])
    write_state(layout, open_gate_state("r1", "Release?", now=now))
    write_lease(layout, "r2", now=now)


def cold(layout, *, parallel_reads: int, now) -> tuple[StatusCache, dict[str, bytes]]:
    clear_status_cache(layout)
    cache = StatusCache(layout, parallel_reads=parallel_reads)
    cache.refresh(now=now, ttl_s=0, force=True)
    shards = {p.name: p.read_bytes() for p in shard_dir(layout).iterdir()}
    return cache, shards


def test_shared_reading_builds_the_cache_one_process_builds(layout):
    """Entries, bookkeeping and shard files equal a refresh done in one process."""
    seeded(layout)
    now = utcnow()
    alone, alone_shards = cold(layout, parallel_reads=10**9, now=now)
    shared, shared_shards = cold(layout, parallel_reads=2, now=now)
    assert shared.goals == alone.goals and len(shared.goals) == 13
    assert shared._unrun == alone._unrun and set(shared._unrun) >= {f"u{i}" for i in range(5)}
    assert shared._leased == alone._leased == {"r2"}
    assert sorted(shared._rechecks) == sorted(alone._rechecks)
    assert shared._members == alone._members
    assert shared_shards == alone_shards
    assert shared.projection() == alone.projection()


def test_a_worker_that_dies_leaves_the_reading_to_this_process(layout, monkeypatch, capsys):
    """The worker killed at its fault point: the refresh reads its share itself, and warns."""
    seeded(layout)
    now = utcnow()
    alone, _ = cold(layout, parallel_reads=10**9, now=now)
    monkeypatch.setenv(FAULT_ENV, "status:worker")
    shared, _ = cold(layout, parallel_reads=2, now=now)
    assert shared.goals == alone.goals
    assert "status_worker_failed" in capsys.readouterr().out
