"""The scheduling index: the same ranking as select, at the cost of the goals that changed."""

from __future__ import annotations

import random
from datetime import timedelta

from loopx.model import utcnow
from loopx.registry.goalrecords import GoalStatus, QuotaPolicy
from loopx.root import Layout
from loopx.root.hints import note_goal_changed
from loopx.schedule.candidates import gather_candidates
from loopx.schedule.index import ScheduleIndex
from loopx.schedule.select import select
from loopx.state import GoalState, update_state
from loopx.testing.status_fixtures import (
    make_goal,
    open_gate_state,
    register_goals,
    write_lease,
    write_state,
)


def ids(index: ScheduleIndex, layout: Layout) -> list[str]:
    now = utcnow()
    index.refresh(now=now)
    return [c.goal_id for c in index.ranked(now=now, limit=1000)]


def test_ranking_matches_select_over_mixed_goals(layout: Layout) -> None:
    """Priorities, pauses, gates, leases, compute 0 and future turns rank exactly as select does."""
    rng = random.Random(14)
    now = utcnow()
    goals = []
    for i in range(40):
        fields: dict[str, object] = {"priority": rng.randint(0, 2)}
        if i % 7 == 0:
            fields["status"] = GoalStatus.PAUSED
        if i % 11 == 0:
            fields["quota"] = QuotaPolicy(compute=0.0)
        goals.append(make_goal(f"g{i:02d}", now=now, workdir=layout.root, **fields))
    register_goals(layout, goals)
    for i in range(40):
        goal_id = f"g{i:02d}"
        if i % 5 == 0:
            write_state(layout, open_gate_state(goal_id, "ok?", now=now))
        elif i % 3 == 0:
            later = now + timedelta(hours=1)
            write_state(layout, GoalState(goal_id=goal_id, next_eligible_at=later, updated_at=now))
        if i % 13 == 1:
            write_lease(layout, goal_id, now=now)
    index = ScheduleIndex(layout)
    expected = [c.goal_id for c in select(gather_candidates(layout, now=now), now=now)]
    assert ids(index, layout) == expected
    assert expected  # the mix leaves some goals eligible


def test_a_changed_goal_is_seen_through_its_hint_and_only_it_is_read(layout: Layout) -> None:
    """After the first build, a refresh reads the hinted goal, not all of them."""
    now = utcnow()
    register_goals(
        layout, [make_goal(f"g{i:03d}", now=now, workdir=layout.root) for i in range(200)]
    )
    index = ScheduleIndex(layout, slice_size=0)
    assert index.refresh(now=now) == 200
    assert index.refresh(now=now) == 0
    later = now + timedelta(hours=1)

    def defer(state: GoalState) -> GoalState:
        return state.model_copy(update={"next_eligible_at": later})

    update_state(layout, "g000", defer)  # leaves a hint
    assert index.refresh(now=now) == 1
    assert "g000" not in [c.goal_id for c in index.ranked(now=now, limit=1000)]
    assert index.next_wake() == later


def test_a_goal_waiting_on_a_human_has_no_timer_and_a_hint_wakes_it(layout: Layout) -> None:
    """A gate keeps a goal out without a timer; answering it (a state write) brings it back."""
    now = utcnow()
    register_goals(layout, [make_goal("g", now=now, workdir=layout.root)])
    write_state(layout, open_gate_state("g", "ok?", now=now))
    index = ScheduleIndex(layout, slice_size=0)
    assert ids(index, layout) == []
    assert index.next_wake() is None
    write_state(layout, GoalState(goal_id="g", updated_at=now))
    assert ids(index, layout) == []  # no hint yet: the index still advises the old view
    assert not index.hinted_since_refresh()
    note_goal_changed(layout, "g")
    assert index.hinted_since_refresh()
    assert ids(index, layout) == ["g"]


def test_the_safety_net_slice_finds_a_change_without_a_hint(layout: Layout) -> None:
    """A change whose hint was lost is found by the round-robin slice within N/slice steps."""
    now = utcnow()
    register_goals(layout, [make_goal(f"g{i}", now=now, workdir=layout.root) for i in range(10)])
    index = ScheduleIndex(layout, slice_size=3)
    assert len(ids(index, layout)) == 10
    write_state(layout, open_gate_state("g5", "ok?", now=now))  # no hint
    for _ in range(4):
        ranked = ids(index, layout)
    assert "g5" not in ranked and len(ranked) == 9


def test_new_and_removed_goals_follow_the_registry(layout: Layout) -> None:
    """A goal added or paused after the build is picked up (its goal file leaves a hint)."""
    now = utcnow()
    register_goals(layout, [make_goal("a", now=now, workdir=layout.root)])
    index = ScheduleIndex(layout, slice_size=0)
    assert ids(index, layout) == ["a"]
    register_goals(layout, [make_goal("b", now=now, workdir=layout.root, priority=5)])
    assert ids(index, layout) == ["b", "a"]
    register_goals(layout, [make_goal("b", now=now, workdir=layout.root, status=GoalStatus.PAUSED)])
    assert ids(index, layout) == ["a"]
