"""An idle agent and the supervisor's refresh find hint-less changes by stat, within their bounds."""

from __future__ import annotations

import os
import time
from datetime import datetime, timedelta

from loopx.model import utcnow
from loopx.root import Layout
from loopx.root.hints import note_goal_changed
from loopx.schedule.index import DEFAULT_DEEP_SWEEP_S, DEFAULT_SWEEP_S, ScheduleIndex
from loopx.state import GoalState
from loopx.status.cache import StatusCache
from loopx.status.fingerprint import goal_fingerprint
from loopx.status.watch import RACY_NS, FingerprintMemo
from loopx.testing.status_fixtures import (
    append_history,
    history_line,
    make_goal,
    register_goals,
    write_lease,
    write_state,
)


def settle(layout: Layout) -> None:
    """Date every goal directory and file a minute back, as if written long ago (not racy)."""
    past = time.time_ns() - 60 * 10**9
    for goal_dir in layout.goals_dir.iterdir():
        for path in [*goal_dir.iterdir(), goal_dir]:
            os.utime(path, ns=(past, past), follow_symlinks=False)


def waiting_root(layout: Layout, n: int, *, now: datetime) -> None:
    """``n`` goals, every one waiting a day, settled."""
    register_goals(layout, [make_goal(f"g{i}", now=now, workdir=layout.root) for i in range(n)])
    tomorrow = now + timedelta(days=1)
    for i in range(n):
        write_state(layout, GoalState(goal_id=f"g{i}", next_eligible_at=tomorrow, updated_at=now))
    settle(layout)


def ready(index: ScheduleIndex, *, now: datetime) -> list[str]:
    return [c.goal_id for c in index.ranked(now=now, limit=100)]


def test_an_idle_refresh_reads_nothing_and_sleeps_until_the_sweep(layout: Layout) -> None:
    """Every goal waiting a day: a refresh reads no goal, and the idle sleep lasts to the sweep."""
    now = utcnow()
    waiting_root(layout, 20, now=now)
    index = ScheduleIndex(layout, slice_size=5)
    assert index.refresh(now=now) == 20  # the build
    for step in range(1, 6):
        assert index.refresh(now=now + timedelta(seconds=step)) == 0
    assert index.refresh(now=now + timedelta(seconds=DEFAULT_SWEEP_S + 1)) == 0  # a sweep: stats
    later = now + timedelta(seconds=DEFAULT_SWEEP_S + 1)
    sleep = index.idle_sleep(now=later, longest=2.0)
    assert DEFAULT_SWEEP_S - 1 <= sleep <= DEFAULT_SWEEP_S  # not the 2 s backoff


def test_a_replaced_state_without_a_hint_is_found_by_the_sweep(layout: Layout) -> None:
    """A hint-less state write is seen at the next full sweep (60 s), not before (slice off)."""
    now = utcnow()
    waiting_root(layout, 10, now=now)
    index = ScheduleIndex(layout, slice_size=0)
    index.refresh(now=now)
    write_state(layout, GoalState(goal_id="g3", updated_at=now))  # no hint: eligible now
    assert ready(index, now=now) == []
    index.refresh(now=now + timedelta(seconds=5))
    assert ready(index, now=now) == []  # the sweep is not due yet
    index.refresh(now=now + timedelta(seconds=DEFAULT_SWEEP_S))
    assert ready(index, now=now) == ["g3"]


def test_an_in_place_edit_is_found_by_the_deep_sweep(layout: Layout) -> None:
    """An edit that moves no directory is missed by the stat sweep and found by the deep one."""
    now = utcnow()
    waiting_root(layout, 4, now=now)
    index = ScheduleIndex(layout, slice_size=0)
    index.refresh(now=now)
    state = layout.state_file("g1")
    data = GoalState(goal_id="g1", updated_at=now).model_dump_json().encode()
    with state.open("r+b") as f:  # in place: the directory's mtime stays
        f.write(data)
        f.truncate()
    index.refresh(now=now + timedelta(seconds=DEFAULT_SWEEP_S))
    assert ready(index, now=now) == []
    index.refresh(now=now + timedelta(seconds=DEFAULT_DEEP_SWEEP_S))
    assert ready(index, now=now) == ["g1"]


def test_a_goal_file_replaced_without_a_hint_is_read_again_at_the_sweep(layout: Layout) -> None:
    """A new policy written without a hint (a paused goal made active) reaches the index."""
    now = utcnow()
    register_goals(layout, [make_goal("g", now=now, workdir=layout.root, status="paused")])
    settle(layout)
    index = ScheduleIndex(layout, slice_size=0)
    index.refresh(now=now)
    assert ready(index, now=now) == []
    goal = make_goal("g", now=now, workdir=layout.root)
    path = layout.goal_file("g")
    tmp = path.with_name("goal.json.tmp")
    tmp.write_text(goal.model_dump_json())
    os.replace(tmp, path)  # no hint
    index.refresh(now=now + timedelta(seconds=DEFAULT_SWEEP_S))
    assert ready(index, now=now) == ["g"]


def test_the_memo_answers_by_one_stat_until_the_directory_moves(layout: Layout) -> None:
    """Remembered while the directory stands still; a replaced file or `exact` reads afresh."""
    now = utcnow()
    waiting_root(layout, 1, now=now)
    append_history(layout, [history_line("g0", 1, ended_at=now)])  # creates the history file
    settle(layout)
    goal_dir = str(layout.goals_dir / "g0")
    memo = FingerprintMemo()
    first = memo.fingerprint(goal_dir)
    append_history(layout, [history_line("g0", 2, ended_at=now)])  # an append: no dir change
    assert memo.fingerprint(goal_dir) == first
    assert memo.fingerprint(goal_dir, exact=True) == goal_fingerprint(goal_dir) != first
    write_state(layout, GoalState(goal_id="g0", updated_at=now))  # a replace: the dir moves
    assert time.time_ns() - os.stat(goal_dir).st_mtime_ns < RACY_NS  # racy: never remembered
    assert memo.fingerprint(goal_dir) == goal_fingerprint(goal_dir)


def test_the_memo_holds_the_callers_equal_fingerprint(layout: Layout) -> None:
    """An equal fingerprint the caller holds is the one remembered and returned; a stale one is not."""
    now = utcnow()
    waiting_root(layout, 1, now=now)
    settle(layout)
    goal_dir = str(layout.goals_dir / "g0")
    read = goal_fingerprint(goal_dir)
    known = tuple(map(int, map(str, read)))  # equal, another tuple, as the database loads it
    memo = FingerprintMemo()
    assert memo.fingerprint(goal_dir, known=known) is known
    assert memo.fingerprint(goal_dir) is known  # remembered
    stale = (*read[:-1], read[-1] + 1)
    assert memo.fingerprint(goal_dir, exact=True, known=stale) == read
    assert memo.fingerprint(goal_dir, exact=True, known=stale) is not stale


def test_a_refresh_with_the_memo_still_sees_a_hinted_append(layout: Layout) -> None:
    """The supervisor's memo never hides a hinted change (a turn's history append)."""
    now = utcnow()
    waiting_root(layout, 3, now=now)
    cache = StatusCache(layout, memo=FingerprintMemo())
    cache.refresh(now=now, ttl_s=0)
    append_history(layout, [history_line("g2", 1, ended_at=now)])
    note_goal_changed(layout, "g2")
    report = cache.refresh(now=now + timedelta(seconds=120), ttl_s=0)  # a full scan, hinted
    assert report.full_scan
    assert report.changed == frozenset({"g2"})
    assert cache.goals["g2"].history.lines == 1


def test_a_goal_leased_by_another_agent_keeps_the_idle_sleep_short(layout: Layout) -> None:
    """A lease holder may die at any time: an idle agent looks again within its backoff."""
    now = utcnow()
    waiting_root(layout, 3, now=now)
    write_state(layout, GoalState(goal_id="g1", updated_at=now))  # eligible but for the lease
    write_lease(layout, "g1", now=now)
    index = ScheduleIndex(layout, slice_size=0)
    index.refresh(now=now)
    assert ready(index, now=now) == []
    assert index.idle_sleep(now=now, longest=2.0) <= 2.0
