"""A cache write of most shards is one pack file; a shard file written later holds its shard over it."""

from __future__ import annotations

import json
import os
from datetime import datetime, timedelta

from loopx.hints import note_goal_changed
from loopx.model import utcnow
from loopx.registry.model import GoalStatus
from loopx.root import Layout
from loopx.status.cache import StatusCache
from loopx.status.current import clear_status_cache
from loopx.status.shards import (
    PACK_NAME,
    SHARDS,
    read_pack,
    read_shards,
    shard_dir,
    shard_file,
    shard_of,
)
from loopx.testing.status_fixtures import (
    append_history,
    history_line,
    make_goal,
    register_goals,
    seed_goal,
)

N = 400  # goals: a cold refresh touches more than half of the 256 shards


def many(layout: Layout) -> datetime:
    """N goals: every fourth ran two turns, the others never ran."""
    now = utcnow()
    goals = [
        seed_goal(layout, f"g{i:03d}", now=now, history=2, workdir=layout.root)
        if i % 4 == 0
        else make_goal(f"g{i:03d}", now=now, workdir=layout.root)
        for i in range(N)
    ]
    register_goals(layout, goals)
    return now


def one_per_shard(shards: range) -> list[str]:
    """A goal of each shard in ``shards`` (those that have one)."""
    out: dict[int, str] = {}
    for i in range(N):
        goal_id = f"g{i:03d}"
        if shard_of(goal_id) in shards:
            out.setdefault(shard_of(goal_id), goal_id)
    return list(out.values())


def advance(layout: Layout, goal_ids: list[str], *, seq: int = 3) -> None:
    """One more committed turn of each goal, hinted as writers do."""
    for goal_id in goal_ids:
        append_history(layout, [history_line(goal_id, seq, ended_at=utcnow())])
        note_goal_changed(layout, goal_id)


def names(layout: Layout) -> set[str]:
    return set(os.listdir(shard_dir(layout)))


def stored(cache: StatusCache) -> tuple[dict[str, object], set[str]]:
    """What the cache holds as the shards store it: full entries, and the goals that never ran."""
    full = {g: c for g, c in cache.goals.items() if g not in cache._unrun}
    return full, set(cache._unrun)


def loaded(layout: Layout) -> tuple[dict[str, object], set[str]]:
    read = read_shards(layout)
    assert read is not None
    return dict(read.goals), set(read.unrun)


def test_a_cold_refresh_writes_one_pack_that_loads_back(layout):
    many(layout)
    cache = StatusCache(layout)
    report = cache.refresh(now=utcnow(), force=True)
    assert report.shards_written > SHARDS // 2
    assert names(layout) == {PACK_NAME}
    assert loaded(layout) == stored(cache)
    again = StatusCache(layout)
    again.load()
    again.refresh(now=utcnow(), ttl_s=60)
    assert {g: c.view for g, c in again.goals.items()} == {
        g: c.view for g, c in cache.goals.items()
    }


def test_a_shard_file_written_later_holds_its_shard_over_the_pack(layout):
    many(layout)
    cache = StatusCache(layout)
    cache.refresh(now=utcnow(), force=True)
    pack_before = read_pack(layout)
    advance(layout, ["g000"])
    report = cache.refresh(now=utcnow(), ttl_s=0, full_scan_after_s=3600)
    assert report.shards_written == 1
    assert names(layout) == {PACK_NAME, shard_file(layout, shard_of("g000")).name}
    assert read_pack(layout) == pack_before  # the pack is not rewritten
    last = cache.goals["g000"].view.last_turn
    assert last is not None and last.seq == 3
    assert loaded(layout) == stored(cache)


def test_a_shard_emptied_after_the_pack_is_written_empty(layout):
    many(layout)
    cache = StatusCache(layout)
    cache.refresh(now=utcnow(), force=True)
    # A goal alone in its shard: archived, its shard has nothing left, and the pack's line
    # for it still names the goal, so an empty shard file must stand over that line.
    alone = next(
        g
        for g in (f"g{i:03d}" for i in range(N))
        if sum(shard_of(f"g{i:03d}") == shard_of(g) for i in range(N)) == 1
    )
    archived = make_goal(alone, now=utcnow(), workdir=layout.root, status=GoalStatus.ARCHIVED)
    register_goals(layout, [archived])
    note_goal_changed(layout, alone)
    cache.refresh(now=utcnow(), ttl_s=0)
    path = shard_file(layout, shard_of(alone))
    assert json.loads(path.read_bytes()) == {"schema_version": 3, "goals": {}, "unrun": []}
    assert alone not in cache.goals
    assert alone not in loaded(layout)[0] and alone not in loaded(layout)[1]


def test_the_pack_is_removed_once_every_line_is_shadowed(layout):
    many(layout)
    cache = StatusCache(layout)
    cache.refresh(now=utcnow(), force=True)
    packed = {shard for shard, _ in read_pack(layout)}
    # Two refreshes of at most half the shards each: each writes shard files, not a pack.
    for half in (range(SHARDS // 2), range(SHARDS // 2, SHARDS)):
        advance(layout, one_per_shard(half))
        cache.refresh(now=utcnow(), ttl_s=0, full_scan_after_s=3600)
    files = {n for n in names(layout) if n != PACK_NAME}
    assert {shard_file(layout, s).name for s in packed} <= files
    assert PACK_NAME not in names(layout)
    assert loaded(layout) == stored(cache)


def test_a_damaged_pack_rebuilds_the_cache(layout):
    many(layout)
    StatusCache(layout).refresh(now=utcnow(), force=True)
    path = shard_dir(layout) / PACK_NAME
    path.write_bytes(path.read_bytes()[:-100] + b"\n")  # its last line cut
    assert read_shards(layout) is None
    cache = StatusCache(layout)
    report = cache.refresh(now=utcnow(), ttl_s=60)
    assert (report.full_scan, report.goals) == (True, N)


def test_doctor_reports_a_damaged_pack(layout, cli):
    many(layout)
    StatusCache(layout).refresh(now=utcnow(), force=True)
    path = shard_dir(layout) / PACK_NAME
    lines = path.read_bytes().split(b"\n")
    path.write_bytes(b"\n".join([lines[0], lines[1][:-5], *lines[2:]]))  # one shard's line cut
    proc = cli.run("doctor", "--json")
    findings = [f for f in json.loads(proc.stdout)["findings"] if f["path"] == str(path)]
    assert [(f["code"], f["severity"]) for f in findings] == [("schema", "warning")]
    assert "--clear-cache" in findings[0]["repair"]


STATUS = ("status", "--json", "--ttl", "0", "--full-scan-after", "3600")


def status(cli) -> dict[str, object]:
    proc = cli.run(*STATUS)
    assert proc.returncode == 0, proc.stderr
    document: dict[str, object] = json.loads(proc.stdout)
    for key in ("generated_at", "checked_at"):
        document.pop(key)
    for goal in document["goals"]:  # type: ignore[attr-defined]
        goal["quota"].pop("window_start")  # the window slides with the clock
    return document


def test_a_crash_between_the_pack_and_the_shard_files_converges(layout, cli):
    """Killed after a pack was written, before the shard files it replaces were removed.

    Those files, older than the pack, hold their shards over it, as the index on
    disk (older still) expects: the next status re-reads what changed since and
    equals one rebuilt from the goals' files.
    """
    many(layout)
    StatusCache(layout).refresh(now=utcnow(), force=True)  # the pack
    advance(layout, one_per_shard(range(8)))
    status(cli)  # shard files over the pack for 8 shards
    advance(layout, one_per_shard(range(SHARDS)), seq=4)  # a refresh of most shards: a pack
    proc = cli.run(*STATUS, LOOPX_FAULT="status:pack_written")
    assert proc.returncode == 137, proc.stderr
    left = names(layout)
    assert PACK_NAME in left and len(left) == 9  # the new pack and the 8 older shard files
    recovered = status(cli)
    clear_status_cache(layout)
    rebuilt = status(cli)
    assert recovered == rebuilt
    last = {g["goal_id"]: g["last_turn"]["seq"] for g in recovered["goals"] if g["last_turn"]}
    assert all(last[g] == 4 for g in one_per_shard(range(SHARDS)))


def test_an_old_index_is_rebuilt(layout):
    """An index of schema 1 comes from a LoopX that reads no pack: its cache is rebuilt."""
    many(layout)
    StatusCache(layout).refresh(now=utcnow(), force=True)
    index = json.loads(layout.status_file.read_bytes())
    layout.status_file.write_text(json.dumps({**index, "schema_version": 1}))
    cache = StatusCache(layout)
    report = cache.refresh(now=utcnow() + timedelta(seconds=1), ttl_s=60)
    assert (report.full_scan, report.goals) == (True, N)
    assert json.loads(layout.status_file.read_bytes())["schema_version"] == 2


def test_a_rebuilt_cache_leaves_nothing_older_beside_it(layout):
    """A cache rebuilt from the goals' files (its index unusable) clears the pack and old files."""
    many(layout)
    StatusCache(layout).refresh(now=utcnow(), force=True)  # the pack
    kept = ["g000", "g001", "g002"]
    register_goals(
        layout,
        [
            make_goal(f"g{i:03d}", now=utcnow(), workdir=layout.root, status=GoalStatus.ARCHIVED)
            for i in range(3, N)
        ],
    )
    stray = shard_file(layout, next(s for s in range(SHARDS) if s not in map(shard_of, kept)))
    stray.write_text('{"schema_version": 3, "goals": {}, "unrun": []}')
    index = json.loads(layout.status_file.read_bytes())
    layout.status_file.write_text(json.dumps({**index, "schema_version": 1}))
    cache = StatusCache(layout)
    cache.refresh(now=utcnow(), ttl_s=60)
    assert set(cache.goals) == set(kept)
    assert names(layout) == {shard_file(layout, shard_of(g)).name for g in kept}
    assert set(loaded(layout)[0]) | loaded(layout)[1] == set(kept)
