"""Incremental refresh of the cached status projection, on real files."""

from __future__ import annotations

import json
import os
import sqlite3
from datetime import timedelta
from pathlib import Path

from loopx.history.reader import (
    HistoryCounts,
    count_history,
    history_tail,
    iter_lines_backwards,
    newest_lines,
)
from loopx.model import model_shape, utcnow
from loopx.registry.catalog import load_registry
from loopx.registry.goalrecords import GoalStatus
from loopx.registry.goals import open_gate, set_status
from loopx.root.hints import note_goal_changed
from loopx.status.cache import StatusCache
from loopx.status.current import clear_status_cache, current_status, refresh_status
from loopx.status.database import SCHEMA_VERSION, StatusStore, store_file
from loopx.status.view import Actor, GoalStatusView, StatusReason
from loopx.testing.status_fixtures import (
    append_history,
    history_line,
    make_goal,
    register_goals,
    seed_goal,
    write_lease,
)
from loopx.turn.historyline import HistoryLine
from loopx.turn.outcome import ResultKind


def seeded(layout, n: int = 5, history: int = 3):
    now = utcnow()
    goals = [
        seed_goal(layout, f"g{i}", now=now, history=history, workdir=layout.root) for i in range(n)
    ]
    register_goals(layout, goals)
    return now


def fresh_cache(layout) -> StatusCache:
    cache = StatusCache(layout)
    cache.refresh(now=utcnow(), ttl_s=0)
    return cache


def by_id(cache: StatusCache, goal_id: str):
    return cache.goals[goal_id].view


def test_cold_refresh_reads_every_goal(layout):
    """The first refresh projects every registered goal and writes them to the database."""
    seeded(layout)
    report = StatusCache(layout).refresh(now=utcnow(), ttl_s=0)
    assert (report.full_scan, report.goals, report.reread) == (True, 5, 5)
    loaded = StatusStore(layout).load()
    assert loaded is not None and sorted(loaded.goals) == [f"g{i}" for i in range(5)]


def test_the_database_is_private_to_this_host_and_user(layout):
    """The database lives outside the root, in a 0700 directory, as a 0600 file."""
    seeded(layout)
    fresh_cache(layout)
    path = store_file(layout)
    assert layout.root not in path.parents
    assert (path.parent.stat().st_mode & 0o777, path.stat().st_mode & 0o777) == (0o700, 0o600)


def test_a_hint_inside_the_ttl_is_read_at_once(layout):
    """A hinted change is shown by the next refresh even inside the TTL."""
    seeded(layout)
    cache = fresh_cache(layout)
    open_gate(layout, "g2", "ship it?", now=utcnow())
    report = cache.refresh(now=utcnow(), ttl_s=300)
    assert (report.refreshed, report.full_scan, report.reread) == (True, False, 1)
    assert by_id(cache, "g2").reason is StatusReason.GATE_PENDING


def test_refresh_within_ttl_reads_nothing(layout):
    """A cache younger than the TTL is returned as it is."""
    seeded(layout)
    cache = fresh_cache(layout)
    report = cache.refresh(now=utcnow(), ttl_s=60)
    assert (report.refreshed, report.reread) == (False, 0)


def test_hinted_change_rereads_only_that_goal(layout):
    """A history append with a change hint re-reads one goal, and its view shows the new turn."""
    seeded(layout)
    cache = fresh_cache(layout)
    append_history(layout, [history_line("g2", 4, ended_at=utcnow(), summary="new work")])
    note_goal_changed(layout, "g2")
    report = cache.refresh(now=utcnow(), ttl_s=0)
    assert (report.full_scan, report.reread, report.shards_written) == (False, 1, 1)
    assert by_id(cache, "g2").last_turn.summary == "new work"


def test_unhinted_change_is_found_by_full_scan(layout):
    """A change without a hint is found by the next full scan, by fingerprint."""
    seeded(layout)
    cache = fresh_cache(layout)
    append_history(layout, [history_line("g3", 4, ended_at=utcnow(), summary="quiet write")])
    assert cache.refresh(now=utcnow(), ttl_s=0).reread == 0
    report = cache.refresh(now=utcnow(), ttl_s=0, full_scan_after_s=0)
    assert (report.full_scan, report.reread) == (True, 1)
    assert by_id(cache, "g3").last_turn.summary == "quiet write"


def test_leased_goal_is_rechecked_without_a_hint(layout):
    """A goal that held a lease at the last refresh is checked every refresh."""
    now = seeded(layout)
    write_lease(layout, "g1", now=now)
    cache = fresh_cache(layout)
    assert by_id(cache, "g1").reason is StatusReason.RUNNING
    layout.lease_file("g1").unlink()
    cache.refresh(now=utcnow(), ttl_s=0)
    assert by_id(cache, "g1").reason is StatusReason.READY


def test_registry_change_is_seen(layout):
    """Pausing a goal in the registry changes its view at the next refresh."""
    seeded(layout)
    cache = fresh_cache(layout)
    set_status(layout, "g0", GoalStatus.PAUSED, now=utcnow())
    cache.refresh(now=utcnow(), ttl_s=0)
    assert (by_id(cache, "g0").actor, by_id(cache, "g0").reason) == (
        Actor.HUMAN,
        StatusReason.PAUSED,
    )


def test_gate_opened_through_goals_api_is_hinted(layout):
    """update_state notes the change, so an opened gate shows without a full scan."""
    seeded(layout)
    cache = fresh_cache(layout)
    open_gate(layout, "g4", "Which database?", now=utcnow())
    report = cache.refresh(now=utcnow(), ttl_s=0)
    assert report.full_scan is False
    assert by_id(cache, "g4").reason is StatusReason.GATE_PENDING


def test_new_and_removed_goals(layout):
    """A newly registered goal appears; an archived one leaves the queue."""
    now = seeded(layout, n=2)
    cache = fresh_cache(layout)
    register_goals(layout, [make_goal("late", now=now, workdir=layout.root)])
    set_status(layout, "g0", GoalStatus.ARCHIVED, now=now)
    cache.refresh(now=utcnow(), ttl_s=0)
    assert sorted(cache.goals) == ["g1", "late"]


def test_goal_file_changed_behind_the_index_shows_in_a_cold_status(layout):
    """A goal file rewritten without a hint shows at once in a full scan.

    The full scan stats every goal file anyway, so the goal index does not
    check them itself then; the scan must re-read what moved.
    """
    seeded(layout, n=3)
    assert load_registry(layout).goals["g1"].status is GoalStatus.ACTIVE  # index fresh
    path = layout.goal_dir("g1") / "goal.json"
    goal = json.loads(path.read_text())
    goal["status"] = "paused"
    tmp = path.with_name("goal.json.tmp")
    tmp.write_text(json.dumps(goal))
    os.replace(tmp, path)  # as a crash between the write and its hint would leave it
    cache = StatusCache(layout)
    cache.refresh(now=utcnow(), ttl_s=0, force=True)
    assert (by_id(cache, "g1").reason, by_id(cache, "g0").reason) == (
        StatusReason.PAUSED,
        StatusReason.READY,
    )
    assert load_registry(layout).goals["g1"].status is GoalStatus.PAUSED


def test_time_alone_rechecks_a_waiting_goal(layout):
    """A waiting goal becomes ready once its next eligible time passes, with no file change."""
    from loopx.state import update_state

    now = seeded(layout, n=1)
    update_state(
        layout,
        "g0",
        lambda s: s.model_copy(update={"next_eligible_at": now + timedelta(minutes=5)}),
    )
    cache = StatusCache(layout)
    cache.refresh(now=now, ttl_s=0)
    assert by_id(cache, "g0").reason is StatusReason.WAITING
    cache.refresh(now=now + timedelta(minutes=6), ttl_s=0, full_scan_after_s=3600)
    assert by_id(cache, "g0").reason is StatusReason.READY


def test_damaged_state_is_reported_not_raised(layout):
    """A damaged state.json makes the goal human/quarantined; the refresh still succeeds."""
    seeded(layout, n=2)
    layout.state_file("g1").write_text("{not json")
    cache = fresh_cache(layout)
    v = by_id(cache, "g1")
    assert (v.actor, v.reason) == (Actor.HUMAN, StatusReason.QUARANTINED)
    assert any("damaged" in w for w in v.warnings)


def test_quarantined_journal_is_listed(layout):
    """An entry named <goal>__<name> in quarantine/ is attributed to its goal."""
    seeded(layout, n=2)
    (layout.quarantine_dir / "g1__turn-7.json").write_text("{}")
    (layout.quarantine_dir / "g1__turn-7.json.reason").write_text("phases out of order")
    cache = fresh_cache(layout)
    assert by_id(cache, "g1").quarantined == ["g1__turn-7.json"]
    assert cache.projection().quarantined_total == 1


def test_another_process_reads_the_cache_without_rereading(layout):
    """A second cache (another process) loads the database and, within the TTL, reads no goal."""
    seeded(layout)
    fresh_cache(layout)
    other = StatusCache(layout)
    report = other.refresh(now=utcnow(), ttl_s=60)
    assert (report.refreshed, len(other.goals)) == (False, 5)


def test_entries_read_back_equal_the_ones_built(layout):
    """Another process loads from the database the same entries the refresh built in memory."""
    # Given goals that ran and goals that never ran (whose entries are built unvalidated)
    now = seeded(layout, n=3)
    never = [make_goal(f"n{i}", now=now, workdir=layout.root) for i in range(3)]
    register_goals(layout, never)
    built = fresh_cache(layout).goals
    # When another process loads the cache (within the TTL)
    other = StatusCache(layout)
    assert not other.refresh(now=utcnow(), ttl_s=60).refreshed
    # Then it holds equal entries, and the never-ran goals were among them
    assert other.goals == built
    assert {g for g, c in built.items() if c.view.turns_applied == 0} >= {"n0", "n1", "n2"}


def test_clear_cache_rebuilds(layout):
    """--clear-cache deletes the database; the next load rebuilds it."""
    seeded(layout)
    refresh_status(layout, now=utcnow(), ttl_s=0)
    clear_status_cache(layout)
    assert not store_file(layout).exists()
    refresh_status(layout, now=utcnow(), ttl_s=0)
    assert current_status(layout, now=utcnow()).counts.total == 5


def test_a_damaged_database_is_set_aside_and_rebuilt(layout):
    """A damaged database is not trusted: set aside, and the cache rebuilt from the goal files."""
    seeded(layout)
    fresh_cache(layout)
    path = store_file(layout)
    with path.open("r+b") as f:  # the header and the first pages
        f.write(b"garbage" * 2000)
    cache = StatusCache(layout)
    report = cache.refresh(now=utcnow(), ttl_s=60)
    assert (report.full_scan, report.reread) == (True, 5)
    assert path.with_name("status.db.damaged").exists()
    loaded = StatusStore(layout).load()
    assert loaded is not None and len(loaded.goals) == 5


def test_a_new_view_field_changes_the_schema_and_rows_without_it_are_rebuilt(layout):
    """The database's version follows the view's fields: rows stored before a field was added are not read."""

    class Wider(GoalStatusView):
        added: int = 0

    assert model_shape(Wider) != model_shape(GoalStatusView)
    assert "LeaseView.epoch" in model_shape(GoalStatusView)  # nested views count too
    seeded(layout)
    fresh_cache(layout)
    path = store_file(layout)
    with sqlite3.connect(path) as db:  # as a LoopX whose view had other fields wrote it
        db.execute(f"PRAGMA user_version={SCHEMA_VERSION ^ 1}")
    assert StatusStore(layout).load() is None
    report = StatusCache(layout).refresh(now=utcnow(), ttl_s=60)
    assert (report.full_scan, report.reread) == (True, 5)
    loaded = StatusStore(layout).load()
    assert loaded is not None and len(loaded.goals) == 5


def test_history_tail_skips_a_torn_last_line(layout):
    """A torn last history line is ignored by the tail reader."""
    now = seeded(layout, n=1, history=3)
    with open(layout.history_file("g0"), "ab") as f:
        f.write(b'{"turn_key": "torn')
    tail = history_tail(layout.history_file("g0"))
    assert [h.seq for h in tail] == [1, 2, 3]
    assert now is not None


def test_newest_lines_keep_a_damaged_line_raw(layout):
    """The newest lines come newest first, a damaged one as its bytes, at most ``limit``."""
    seeded(layout, n=1, history=3)
    with open(layout.history_file("g0"), "ab") as f:
        f.write(b'{"not": "a history line"}\n')
    lines = list(newest_lines(layout.history_file("g0"), 3))
    assert lines[0] == b'{"not": "a history line"}'
    assert [h.seq for h in lines[1:] if isinstance(h, HistoryLine)] == [3, 2]


def test_backwards_reader_across_blocks(tmp_path: Path):
    """Reading lines backwards in tiny blocks yields every complete line, newest first."""
    path = tmp_path / "f.jsonl"
    lines = [json.dumps({"n": i, "pad": "x" * (i % 7)}).encode() for i in range(50)]
    path.write_bytes(b"\n".join(lines) + b"\n" + b'{"torn"')
    assert list(iter_lines_backwards(path, block=5)) == list(reversed(lines))


def test_history_counts_are_incremental(layout):
    """Counting from a saved offset adds only the appended lines."""
    now = seeded(layout, n=1, history=3)
    first = count_history(layout.history_file("g0"), HistoryCounts())
    append_history(layout, [history_line("g0", 4, ended_at=now, kind=ResultKind.WAIT)])
    second = count_history(layout.history_file("g0"), first)
    assert (first.lines, second.lines, second.kinds["progress"], second.kinds["wait"]) == (
        3,
        4,
        3,
        1,
    )
    assert second.offset == os.path.getsize(layout.history_file("g0"))


def test_journal_quarantined_by_recovery_is_seen_without_a_full_scan(layout):
    """quarantine/<goal>/<journal> (recovery's layout) is attributed, and a second one is noticed."""
    seeded(layout, n=2)
    aside = layout.quarantine_dir / "g0"
    aside.mkdir()
    (aside / "t1.json").write_text("{}")
    (aside / "t1.json.reason.json").write_text("{}")
    cache = fresh_cache(layout)
    assert by_id(cache, "g0").quarantined == ["t1.json"]
    (aside / "t2.json").write_text("{}")
    report = cache.refresh(now=utcnow(), ttl_s=0, full_scan_after_s=3600)
    assert report.full_scan is False
    assert by_id(cache, "g0").quarantined == ["t1.json", "t2.json"]
    assert cache.projection().quarantined_total == 2


def test_views_share_equal_quota_views_without_changing_their_json(layout):
    """Goals of one policy with nothing spent hold one quota view, loaded or projected; -0.0 is not 0.0."""
    from loopx.status.view import GoalStatusView, share_values, trusted

    seeded(layout, n=4, history=0)
    cache = fresh_cache(layout)
    quotas = {id(c.view.quota) for c in cache.goals.values()}
    assert len(quotas) == 1, "one refresh's equal quota views are one instance"
    loaded = StatusCache(layout)
    assert loaded.load()
    assert len({id(c.view.quota) for c in loaded.goals.values()}) == 1
    for goal_id, cached in loaded.goals.items():
        assert cached.view == cache.goals[goal_id].view
    view = cache.goals["g0"].view
    zero = trusted(type(view.quota), {**view.quota.__dict__, "spent_wall_s": 0.0})
    negative = trusted(type(view.quota), {**view.quota.__dict__, "spent_wall_s": -0.0})
    first = share_values(trusted(GoalStatusView, {**view.__dict__, "quota": zero}))
    second = share_values(trusted(GoalStatusView, {**view.__dict__, "quota": negative}))
    assert second.quota is not first.quota
    assert second.model_dump_json() != first.model_dump_json()
    for spent, other in ((1.0, 0.0), (-1.0, -0.0)):  # a signed zero's key is not another number's
        one = trusted(type(view.quota), {**view.quota.__dict__, "spent_cpu_s": spent})
        zero = trusted(type(view.quota), {**view.quota.__dict__, "spent_cpu_s": other})
        held = share_values(trusted(GoalStatusView, {**view.__dict__, "quota": one}))
        later = share_values(trusted(GoalStatusView, {**view.__dict__, "quota": zero}))
        assert (held.quota.spent_cpu_s, later.quota.spent_cpu_s) == (spent, other)


def test_a_cache_that_keeps_no_view_bytes_prints_the_same_document(layout):
    """The supervisor's cache drops the written views' bytes; a document reads the rows back."""
    from loopx.status.view import json_bytes

    seeded(layout, n=3, history=2)
    lean = StatusCache(layout, keep_views=False)
    report = lean.refresh(now=utcnow(), ttl_s=0)
    assert report.reread == 3
    assert lean._fresh == {}  # what the flag saves
    projection = lean.projection()
    assert lean.document(projection) == json_bytes(projection, indent=2) + b"\n"


def test_a_cache_that_keeps_no_views_refreshes_from_its_rows_alone(layout):
    """The supervisor's cache holds no views once written; it still sees leases and changes.

    Asked for a projection, it loads the views and keeps them: the same document as a
    cache that kept them all along.
    """
    from loopx.status.view import json_bytes

    now = seeded(layout, n=4, history=2)
    write_lease(layout, "g1", now=now)
    lean = StatusCache(layout, keep_views=False)
    assert lean.refresh(now=utcnow(), ttl_s=0).reread == 4
    assert all(c.view is None for c in lean.goals.values())
    assert {g for g, c in lean.goals.items() if c.leased} == {"g1"}
    # Another holder of no views loads the rows without their views, leases included.
    other = StatusCache(layout, keep_views=False)
    assert other.load()
    assert all(c.view is None for c in other.goals.values())
    assert {g for g, c in other.goals.items() if c.leased} == {"g1"}
    # A released lease and a new gate are seen by the lean cache's next refresh.
    layout.lease_file("g1").unlink()
    open_gate(layout, "g2", "ship it?", now=utcnow())
    report = lean.refresh(now=utcnow(), ttl_s=0)
    assert report.changed is not None and {"g1", "g2"} <= report.changed
    assert not any(c.leased for c in lean.goals.values())
    # Its projection loads the views written, and equals one of a cache that kept them.
    projection = lean.projection()
    assert projection is not None and lean.keep_views
    assert all(c.view is not None for c in lean.goals.values())
    full = fresh_cache(layout)  # a later check: its own timestamps
    expected = full.projection()
    assert expected is not None
    assert [json_bytes(v, indent=2) for v in projection.goals] == [
        json_bytes(v, indent=2) for v in expected.goals
    ]
    assert lean.document(projection) == json_bytes(projection, indent=2) + b"\n"
    assert by_id(lean, "g2").reason is StatusReason.GATE_PENDING
