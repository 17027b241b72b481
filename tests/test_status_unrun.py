"""The bulk path for goals that never ran stores what the one-by-one path stores."""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from loopx.model import utcnow
from loopx.registry.model import GoalStatus
from loopx.registry.quota_policy import QuotaPolicy
from loopx.root import Layout
from loopx.status.cache import StatusCache
from loopx.status.current import clear_status_cache
from loopx.status.shards import shard_dir, shard_of
from loopx.status.sources import probes_dir
from loopx.status.view import ProbeObservation
from loopx.storage.files import atomic_write_model
from loopx.testing.status_fixtures import (
    make_goal,
    register_goals,
    seed_goal,
    write_lease,
)


class OneByOne(StatusCache):
    """The cache as it was: every dirty goal through ``_reproject``."""

    def _reproject_all(self, dirty, fingerprints, sources, *, now):
        for goal_id in dirty:
            self._reproject(goal_id, fingerprints.get(goal_id), sources, now=now)
        return {shard_of(g) for g in dirty}


def varied_root(layout: Layout) -> datetime:
    """Goals that never ran under several policies, priorities and statuses, and goals that did."""
    now = utcnow()
    root = layout.root
    goals = [
        make_goal("plain-a", now=now, workdir=root),
        make_goal("plain-b", now=now, workdir=root),
        make_goal("urgent", now=now, workdir=root, priority=9),
        make_goal("paused", now=now, workdir=root, status=GoalStatus.PAUSED),
        make_goal("done", now=now, workdir=root, status=GoalStatus.DONE),
        make_goal("zero", now=now, workdir=root, quota=QuotaPolicy(compute=0)),
        make_goal("capped", now=now, workdir=root, quota=QuotaPolicy(cpu_seconds=5.0)),
        make_goal("long", now=now, workdir=root, quota=QuotaPolicy(window_hours=24)),
        make_goal("named", now=now, workdir=root, objective="mentions named in its objective"),
        make_goal("epoch-only", now=now, workdir=root),
        make_goal("probed", now=now, workdir=root),
        make_goal("quarantined", now=now, workdir=root),
        make_goal("damaged", now=now, workdir=root),
        make_goal("leased", now=now, workdir=root),
        seed_goal(layout, "ran", now=now, history=3, workdir=root),
    ]
    register_goals(layout, goals)
    (layout.goal_dir("epoch-only") / "epoch").write_text("3")
    (layout.goal_dir("damaged") / "state.json").write_text("{not json")
    write_lease(layout, "leased", now=now)
    (layout.quarantine_dir / "quarantined__turn-1.json").write_text("{}")
    probes_dir(layout).mkdir(parents=True, exist_ok=True)
    probe = ProbeObservation(
        goal_id="probed",
        command="true",
        cwd=str(root),
        exit_code=0,
        started_at=now,
        duration_s=0.1,
    )
    atomic_write_model(probes_dir(layout) / "probed.json", probe)
    return now


def shard_bytes(layout: Layout) -> dict[str, bytes]:
    d = shard_dir(layout)
    return {name: (d / name).read_bytes() for name in sorted(os.listdir(d))}


def cold(cache: StatusCache, now: datetime) -> tuple[object, ...]:
    clear_status_cache(cache.layout)
    cache.refresh(now=now, force=True)
    return (
        cache.goals,
        cache._unrun,
        cache._members,
        cache._leased,
        cache._rechecks,
        shard_bytes(cache.layout),
    )


def test_bulk_entries_equal_the_one_by_one_path(layout):
    """A cold refresh stores the same entries, bookkeeping and shard bytes either way."""
    # Given a root of varied goals, refreshed cold by the one-by-one path
    now = varied_root(layout)
    expected = cold(OneByOne(layout), now)
    # When the cache refreshes it cold with the bulk path
    got = cold(StatusCache(layout), now)
    # Then every entry, the bookkeeping and the shards are the same
    names = ("goals", "unrun", "members", "leased", "rechecks", "shards")
    for name, want, have in zip(names, expected, got, strict=True):
        assert have == want, name
    goals, unrun = got[0], got[1]
    assert set(unrun) == {"plain-a", "plain-b", "urgent", "paused", "done", "zero", "capped"} | {
        "long",
        "named",
    }
    # the epoch file keeps epoch-only's entry whole, though nothing else of it is read
    assert "epoch-only" in goals and "epoch-only" not in unrun
    assert goals["damaged"].view.warnings and goals["leased"].view.lease is not None


def test_bulk_path_on_a_later_refresh_keeps_previous_entries(layout):
    """A goal with an entry goes the one-by-one way: both caches agree after a new goal appears."""
    now = varied_root(layout)
    bulk, single = StatusCache(layout), OneByOne(layout)
    cold(single, now)
    cold(bulk, now)
    register_goals(layout, [make_goal("newcomer", now=now, workdir=layout.root)])
    later = now + timedelta(seconds=30)
    bulk.refresh(now=later, force=True)
    single.refresh(now=later, force=True)
    assert bulk.goals == single.goals and bulk._unrun == single._unrun
    assert bulk._members == single._members and bulk._leased == single._leased
    assert bulk._unrun["newcomer"] == later and bulk._unrun["plain-a"] == now
