"""The status shards' compact entries: goals that never ran are stored without their view."""

from __future__ import annotations

import json
from datetime import timedelta

from loopx.hints import note_goal_changed
from loopx.model import utcnow
from loopx.registry.model import GoalStatus
from loopx.registry.quota_policy import QuotaPolicy
from loopx.status.cache import StatusCache
from loopx.status.shards import shard_dir, shard_file, shard_of
from loopx.status.sources import probes_dir
from loopx.status.view import GoalStatusView, ProbeObservation, json_bytes
from loopx.storage.files import atomic_write_model
from loopx.testing.status_fixtures import (
    append_history,
    history_line,
    make_goal,
    register_goals,
    seed_goal,
)


def shard_json(layout, goal_id: str) -> dict:
    return json.loads(shard_file(layout, shard_of(goal_id)).read_text())


def compact_ids(layout) -> set[str]:
    out: set[str] = set()
    for path in shard_dir(layout).iterdir():
        for group in json.loads(path.read_text())["unrun"]:
            out.update(group["goals"])
    return out


def full_ids(layout) -> set[str]:
    return {g for p in shard_dir(layout).iterdir() for g in json.loads(p.read_text())["goals"]}


def mixed_root(layout):
    """A goal that ran, three that never ran (active, paused, compute 0), one probed, one quarantined."""
    now = utcnow()
    ran = seed_goal(layout, "ran", now=now, history=2, workdir=layout.root)
    never = [
        make_goal("never", now=now, workdir=layout.root),
        make_goal("paused", now=now, workdir=layout.root, status=GoalStatus.PAUSED),
        make_goal("zero", now=now, workdir=layout.root, quota=QuotaPolicy(compute=0)),
        make_goal("probed", now=now, workdir=layout.root),
        make_goal("quarantined", now=now, workdir=layout.root),
    ]
    register_goals(layout, [ran, *never])
    (layout.quarantine_dir / "quarantined__turn-1.json").write_text("{}")
    probe = ProbeObservation(
        goal_id="probed",
        command="true",
        cwd=str(layout.root),
        exit_code=0,
        started_at=now,
        duration_s=0.1,
    )
    probes_dir(layout).mkdir(parents=True, exist_ok=True)
    atomic_write_model(probes_dir(layout) / "probed.json", probe)
    return now


def test_compact_entries_reload_into_the_views_built(layout):
    """Never-ran goals are written compactly and another process rebuilds the same views."""
    # Given a cache built over goals that ran, never ran, and never ran but carry a probe or quarantine
    mixed_root(layout)
    built = StatusCache(layout)
    built.refresh(now=utcnow(), ttl_s=0)
    # Then only the plain never-ran goals are compact; the others keep full entries
    assert compact_ids(layout) == {"never", "paused", "zero"}
    assert full_ids(layout) == {"ran", "probed", "quarantined"}
    assert built.goals["probed"].view.probe is not None
    assert built.goals["quarantined"].view.quarantined == ["quarantined__turn-1.json"]
    # When other processes load it, within the TTL and with a refresh
    for ttl_s in (60.0, 0.0):
        other = StatusCache(layout)
        report = other.refresh(now=utcnow(), ttl_s=ttl_s)
        # Then they hold equal entries (and views equal to validated ones), nothing re-read
        assert report.reread == 0
        assert other.goals == built.goals
        for cached in other.goals.values():
            assert GoalStatusView.model_validate(cached.view.model_dump()) == cached.view
        assert other.goals["paused"].view.reason == "paused"
        assert other.goals["zero"].view.reason == "paused"
        printed = [json_bytes(v, indent=None) for v in other.projection().goals]
        assert printed == [json_bytes(v, indent=None) for v in built.projection().goals]


def test_goal_that_runs_gets_a_full_entry(layout):
    """A compact goal that runs a turn is re-read and written with its whole view."""
    now = utcnow()
    register_goals(layout, [make_goal("g", now=now, workdir=layout.root)])
    StatusCache(layout).refresh(now=now, ttl_s=0)
    assert compact_ids(layout) == {"g"}
    # When it runs a turn (its history appears) and a writer hints it
    append_history(layout, [history_line("g", 1, ended_at=now)])
    note_goal_changed(layout, "g")
    other = StatusCache(layout)
    report = other.refresh(now=utcnow(), ttl_s=0)
    # Then it is re-read and stored in full, and a third process loads that view
    assert report.reread == 1
    assert (compact_ids(layout), full_ids(layout)) == (set(), {"g"})
    assert other.goals["g"].view.last_turn is not None
    third = StatusCache(layout)
    third.refresh(now=utcnow(), ttl_s=60)
    assert third.goals == other.goals


def test_version_2_shard_is_rebuilt(layout):
    """A shard of the previous schema is not an error: the cache is rebuilt from the goals."""
    mixed_root(layout)
    StatusCache(layout).refresh(now=utcnow(), ttl_s=0)
    path = shard_file(layout, shard_of("never"))
    old = shard_json(layout, "never")
    old["schema_version"] = 2
    del old["unrun"]
    path.write_text(json.dumps(old))
    cache = StatusCache(layout)
    report = cache.refresh(now=utcnow(), ttl_s=60)
    assert (report.full_scan, report.reread) == (True, 6)
    assert shard_json(layout, "never")["schema_version"] == 3
    assert "never" in compact_ids(layout)


def test_archived_compact_goal_is_dropped_from_its_shard(layout):
    """A never-ran goal archived behind the cache's back disappears from the shards on load."""
    now = utcnow()
    goals = [make_goal(g, now=now, workdir=layout.root) for g in ("a", "b")]
    register_goals(layout, goals)
    StatusCache(layout).refresh(now=now, ttl_s=0)
    register_goals(layout, [goals[0].model_copy(update={"status": GoalStatus.ARCHIVED})])
    # When another process serves the cache within the TTL, then refreshes it
    other = StatusCache(layout)
    other.refresh(now=utcnow(), ttl_s=60)
    assert set(other.goals) == {"b"}
    other.refresh(now=utcnow(), ttl_s=0, force=True)
    # Then the archived goal is gone from memory and from its shard
    assert set(other.goals) == {"b"}
    assert compact_ids(layout) == {"b"}


def test_goals_projected_at_different_times_share_a_shard(layout):
    """Two never-ran goals of one shard projected at different times each keep their time."""
    # Given two goal ids that hash to the same shard, added and projected a second apart
    first, second = _same_shard_ids()
    now = utcnow()
    register_goals(layout, [make_goal(first, now=now, workdir=layout.root)])
    built = StatusCache(layout)
    built.refresh(now=now, ttl_s=0)
    later = now + timedelta(seconds=1)
    register_goals(layout, [make_goal(second, now=later, workdir=layout.root)])
    built.refresh(now=later, ttl_s=0, force=True)
    # Then the shard holds two groups, and another process rebuilds both views as built
    groups = shard_json(layout, first)["unrun"]
    assert sorted(len(g["goals"]) for g in groups) == [1, 1]
    other = StatusCache(layout)
    other.refresh(now=later, ttl_s=60)
    assert other.goals == built.goals
    assert other.goals[first].view.quota.window_start != other.goals[second].view.quota.window_start


def test_changed_policy_of_a_compact_goal_is_seen(layout):
    """A never-ran goal whose goal file changes after the cache was written shows the new policy."""
    now = utcnow()
    goal = make_goal("g", now=now, workdir=layout.root)
    register_goals(layout, [goal])
    StatusCache(layout).refresh(now=now, ttl_s=0)
    register_goals(layout, [goal.model_copy(update={"priority": 7})])
    other = StatusCache(layout)
    other.refresh(now=utcnow(), ttl_s=0)
    assert other.goals["g"].view.priority == 7
    assert compact_ids(layout) == {"g"}
    third = StatusCache(layout)
    third.refresh(now=utcnow(), ttl_s=60)
    assert third.goals == other.goals


def _same_shard_ids() -> tuple[str, str]:
    seen: dict[int, str] = {}
    for i in range(10_000):
        goal_id = f"g{i}"
        other = seen.setdefault(shard_of(goal_id), goal_id)
        if other != goal_id:
            return other, goal_id
    raise AssertionError("no two ids share a shard")
