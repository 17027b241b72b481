"""What keeps an idle fleet cheap at 100,000 goals: paced sweeps and shared field sets."""

from __future__ import annotations

from loopx.registry.quota_policy import QuotaPolicy
from loopx.schedule.rollingsweep import RollingSweep
from loopx.state import GoalState

GOALS = [f"g{i:06d}" for i in range(100_000)]


def test_a_rolling_sweep_covers_every_goal_once_per_period() -> None:
    """Steps a second apart take every goal once per period, in order, none twice."""
    sweep = RollingSweep(60.0, 200.0)
    sweep.restart(0.0)
    period = sweep.period(len(GOALS))
    assert period == len(GOALS) / 200.0  # 500 s: the rate, not the 60 s, bounds it
    seen: list[str] = []
    for second in range(1, int(period) + 1):
        seen += sweep.take(GOALS, float(second))
    assert seen == GOALS


def test_a_step_takes_at_most_a_chunk_whatever_the_goals_and_the_lag() -> None:
    """After an hour without a step, one step still takes a chunk; the next ones catch up."""
    sweep = RollingSweep(60.0, 200.0, chunk=1000)
    sweep.restart(0.0)
    assert len(sweep.take(GOALS, 3600.0)) == 1000
    assert len(sweep.take(GOALS, 3600.0)) == 1000  # lagging: the next step takes more


def test_a_small_root_is_swept_whole_each_period_and_the_idle_wake_waits_for_it() -> None:
    """Ten goals: nothing before the period, all ten at it, and the next chunk a period on."""
    goals = GOALS[:10]
    sweep = RollingSweep(60.0, 200.0)
    sweep.restart(0.0)
    assert sweep.take(goals, 5.0) == []
    assert sweep.next_at(len(goals)) == 60.0
    assert sweep.take(goals, 60.0) == goals
    assert sweep.next_at(len(goals)) == 120.0


def test_records_given_the_same_fields_share_one_set_and_a_copy_does_not_touch_it() -> None:
    """Pydantic's per-instance set of given fields is shared; model_copy adds to its own."""
    a = GoalState.model_validate_json('{"goal_id": "a"}')
    b = GoalState.model_validate_json('{"goal_id": "b"}')
    assert a.__pydantic_fields_set__ is b.__pydantic_fields_set__
    c = a.model_copy(update={"turns_applied": 3})
    assert "turns_applied" in c.model_fields_set
    assert "turns_applied" not in a.model_fields_set
    assert a.model_fields_set == b.model_fields_set == {"goal_id"}
    assert QuotaPolicy().model_fields_set == set()
