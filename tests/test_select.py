"""Select: eligibility, ranking, and weighted fair share over many turns (pure simulation)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loopx.registry.goalrecords import Goal, GoalStatus
from loopx.registry.quota_policy import QuotaPolicy
from loopx.schedule.select import Candidate, Ineligible, select, select_one, why_ineligible

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def goal(
    goal_id: str, *, compute: float = 1.0, priority: int = 0, status: GoalStatus = GoalStatus.ACTIVE
) -> Goal:
    return Goal(
        id=goal_id,
        objective="x",
        workdir="/tmp",
        priority=priority,
        status=status,
        quota=QuotaPolicy(compute=compute),
        created_at=NOW,
        updated_at=NOW,
    )


@pytest.mark.parametrize(
    ("candidate", "reason"),
    [
        (Candidate(goal("a")), None),
        (Candidate(goal("a", status=GoalStatus.PAUSED)), Ineligible.NOT_ACTIVE),
        (Candidate(goal("a", status=GoalStatus.DONE)), Ineligible.NOT_ACTIVE),
        (Candidate(goal("a"), open_gates=1), Ineligible.GATE_PENDING),
        (Candidate(goal("a"), leased_until=NOW + timedelta(seconds=5)), Ineligible.LEASED),
        (Candidate(goal("a"), leased_until=NOW - timedelta(seconds=5)), None),
        (Candidate(goal("a"), quota_allowed=False), Ineligible.QUOTA),
        (Candidate(goal("a", compute=0.0)), Ineligible.QUOTA),
        (
            Candidate(goal("a"), next_eligible_at=NOW + timedelta(seconds=1)),
            Ineligible.NOT_YET_ELIGIBLE,
        ),
        (Candidate(goal("a"), next_eligible_at=NOW), None),
    ],
)
def test_eligibility_rules(candidate: Candidate, reason: Ineligible | None) -> None:
    """Each eligibility rule excludes exactly its case."""
    assert why_ineligible(candidate, now=NOW) == reason


def test_priority_beats_fair_share() -> None:
    """A higher priority runs first even when it has spent far more."""
    ranked = select(
        [
            Candidate(goal("low"), spent_wall_s=0.0),
            Candidate(goal("high", priority=5), spent_wall_s=1e6),
        ],
        now=NOW,
    )
    assert [c.goal_id for c in ranked] == ["high", "low"]


def test_least_share_of_spent_quota_first_then_id() -> None:
    """Within a priority, the lowest spent/compute ratio runs first; ties go by id."""
    ranked = select(
        [
            Candidate(goal("c", compute=0.5), spent_wall_s=10.0),  # 20
            Candidate(goal("b", compute=0.1), spent_wall_s=1.0),  # 10
            Candidate(goal("a", compute=0.2), spent_wall_s=2.0),  # 10
        ],
        now=NOW,
    )
    assert [c.goal_id for c in ranked] == ["a", "b", "c"]


def test_nothing_eligible_gives_none() -> None:
    """select_one is None when no candidate may run."""
    assert select_one([Candidate(goal("a"), open_gates=2)], now=NOW) is None


def simulate(
    shares: dict[str, float], *, turns: int, agents: int, durations: dict[str, float]
) -> dict[str, float]:
    """A busy fleet: each free agent selects from the current spend; a turn's time counts when it ends."""
    spent = dict.fromkeys(shares, 0.0)
    running: dict[str, float] = {}  # goal -> end time
    clock = 0.0
    for _ in range(turns):
        while len(running) >= agents:
            goal_id, end = min(running.items(), key=lambda kv: kv[1])
            clock = end
            del running[goal_id]
            spent[goal_id] += durations[goal_id]
        candidates = [
            Candidate(
                goal(g, compute=s),
                spent_wall_s=spent[g],
                leased_until=NOW + timedelta(hours=1) if g in running else None,
            )
            for g, s in shares.items()
        ]
        chosen = select_one(candidates, now=NOW)
        assert chosen is not None
        running[chosen.goal_id] = clock + durations[chosen.goal_id]
    return spent


def test_weighted_fair_share_proportions() -> None:
    """Goals of compute 0.6/0.3/0.1 competing for a busy agent get time within 10% of those shares."""
    shares = {"a": 0.6, "b": 0.3, "c": 0.1}
    spent = simulate(shares, turns=3000, agents=1, durations={"a": 1.0, "b": 2.5, "c": 0.7})
    total = sum(spent.values())
    for goal_id, share in shares.items():
        assert spent[goal_id] / total == pytest.approx(share, rel=0.10)


def test_weighted_fair_share_with_two_agents() -> None:
    """With two agents, shares a goal can fill (<= 1/2: one turn of a goal at a time) still hold."""
    # A goal never runs two turns at once, so with N agents no goal can take more
    # than 1/N of the fleet; shares within that bound are met.
    shares = {"a": 0.45, "b": 0.35, "c": 0.2}
    spent = simulate(shares, turns=4000, agents=2, durations={"a": 1.0, "b": 2.5, "c": 0.7})
    total = sum(spent.values())
    for goal_id, share in shares.items():
        assert spent[goal_id] / total == pytest.approx(share, rel=0.10)


@settings(max_examples=30, deadline=None)
@given(
    durations=st.lists(st.floats(min_value=0.1, max_value=5.0), min_size=3, max_size=3),
)
def test_fair_share_holds_for_any_turn_lengths(durations: list[float]) -> None:
    """Whatever each goal's turn length, one agent's spend follows the shares within 10%."""
    shares = {"a": 0.6, "b": 0.3, "c": 0.1}
    # Enough turns that one turn of the longest goal is small against the smallest share's total.
    spent = simulate(
        shares, turns=2500, agents=1, durations=dict(zip(shares, durations, strict=True))
    )
    total = sum(spent.values())
    for goal_id, share in shares.items():
        assert spent[goal_id] / total == pytest.approx(share, rel=0.10)
