"""should_run: every reason, its precedence and its exact next_eligible_at (pure, no files)."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loopx.quota.decision import QuotaReason, should_run
from loopx.quota.headroom import HostHeadroom
from loopx.quota.window import BucketFold, WindowSpend, window_of
from loopx.registry.goalrecords import Goal, GoalStatus
from loopx.registry.quota_policy import QuotaPolicy
from loopx.state import Gate, GoalState

NOW = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
ROOMY = HostHeadroom(available_memory_mb=8000, load_1m=0.5, cpu_count=4, measured_at=NOW)

# (seconds before NOW the turn ended, wall_s, cpu_s, tokens, cost_usd)
Turn = tuple[float, float, float, int, float]


def goal(status: GoalStatus = GoalStatus.ACTIVE, **quota: Any) -> Goal:
    return Goal(
        id="g",
        objective="o",
        workdir="/tmp",
        status=status,
        quota=QuotaPolicy(**quota),
        created_at=NOW,
        updated_at=NOW,
    )


def spend(turns: list[Turn], *, window_hours: float, now: datetime = NOW) -> WindowSpend:
    fold = BucketFold()
    for ago, wall, cpu, tokens, cost in turns:
        fold.add(now - timedelta(seconds=ago), wall_s=wall, cpu_s=cpu, tokens=tokens, cost_usd=cost)
    start = now - timedelta(hours=window_hours)
    return window_of(fold.columns(), window_start=start, lifetime=fold.lifetime)


def decide(
    g: Goal,
    turns: list[Turn] = (),  # type: ignore[assignment]
    *,
    state: GoalState | None = None,
    headroom: HostHeadroom = ROOMY,
    leased: bool = False,
    now: datetime = NOW,
):
    s = spend(list(turns), window_hours=g.quota.window_hours, now=now)
    return should_run(g, state or GoalState(goal_id="g"), s, headroom, leased=leased, now=now)


def with_gate() -> GoalState:
    return GoalState(goal_id="g", gates=[Gate(id=1, question="ship it?", opened_at=NOW)])


# --- each reason -------------------------------------------------------------------------------


def test_fresh_goal_is_allowed_with_its_full_allowance():
    """A goal with no spend may run and has its whole allowance left."""
    d = decide(goal(compute=0.5, window_hours=2))
    assert (d.allowed, d.reason, d.allowance_wall_s, d.remaining_wall_s, d.next_eligible_at) == (
        True,
        QuotaReason.OK,
        3600.0,
        3600.0,
        None,
    )
    assert "3,600 s" in d.message


@pytest.mark.parametrize("status", [GoalStatus.DONE, GoalStatus.ARCHIVED])
def test_done_or_archived_goal_is_refused_as_done(status):
    """A finished goal never runs, and nothing will make it eligible."""
    d = decide(goal(status))
    assert (d.allowed, d.reason, d.next_eligible_at) == (False, QuotaReason.DONE, None)


def test_paused_status_is_refused_as_paused():
    """A paused goal is refused until a human resumes it."""
    d = decide(goal(GoalStatus.PAUSED))
    assert (d.reason, d.next_eligible_at) == (QuotaReason.PAUSED, None)
    assert "loopx goal resume g" in d.message


def test_compute_zero_is_a_hard_pause():
    """compute = 0 pauses the goal even with no spend at all."""
    d = decide(goal(compute=0.0))
    assert (d.allowed, d.reason, d.allowance_wall_s) == (False, QuotaReason.PAUSED, 0.0)
    assert "--quota-compute" in d.message


def test_open_gate_is_refused_as_gate_pending():
    """An open gate waits for a human; the message quotes the question."""
    d = decide(goal(), state=with_gate())
    assert (d.reason, d.next_eligible_at) == (QuotaReason.GATE_PENDING, None)
    assert "ship it?" in d.message


def test_resolved_gate_does_not_block():
    """A gate with an answer no longer blocks the goal."""
    state = GoalState(
        goal_id="g", gates=[Gate(id=1, question="q", answer="yes", opened_at=NOW, resolved_at=NOW)]
    )
    assert decide(goal(), state=state).allowed


def test_leased_goal_is_refused_as_leased():
    """A goal another turn holds is refused."""
    d = decide(goal(), leased=True)
    assert (d.reason, d.next_eligible_at) == (QuotaReason.LEASED, None)


def test_future_next_eligible_at_is_not_yet_eligible_until_then():
    """The state's next_eligible_at is the refusal's next_eligible_at."""
    later = NOW + timedelta(minutes=7)
    d = decide(goal(), state=GoalState(goal_id="g", next_eligible_at=later))
    assert (d.reason, d.next_eligible_at) == (QuotaReason.NOT_YET_ELIGIBLE, later)


def test_past_next_eligible_at_does_not_block():
    """A next_eligible_at at or before now is no longer a blocker."""
    assert decide(goal(), state=GoalState(goal_id="g", next_eligible_at=NOW)).allowed


def test_window_exhausted_frees_when_enough_old_spend_leaves():
    """Spent 3 x 25 min of a 60 min allowance: eligible when the first turn leaves the window."""
    g = goal(compute=0.5, window_hours=2)  # allowance 3600 s
    turns = [(6000, 1500, 1, 0, 0), (3000, 1500, 1, 0, 0), (600, 1500, 1, 0, 0)]
    d = decide(g, turns)
    assert (d.allowed, d.reason) == (False, QuotaReason.WINDOW_EXHAUSTED)
    assert d.next_eligible_at == NOW - timedelta(seconds=6000) + timedelta(hours=2)
    assert (d.spent_wall_s, d.remaining_wall_s) == (4500, 0)


def test_window_exhausted_may_need_several_turns_to_leave():
    """When dropping the oldest turn is not enough, the next one's exit time counts."""
    g = goal(compute=0.25, window_hours=4)  # allowance 3600 s
    turns = [(10000, 1000, 0, 0, 0), (9000, 1000, 0, 0, 0), (100, 3000, 0, 0, 0)]
    d = decide(g, turns)
    # 5000 -> 4000 (still >= 3600) -> 3000: the second turn's exit frees it.
    assert d.next_eligible_at == NOW - timedelta(seconds=9000) + timedelta(hours=4)


def test_spend_exactly_at_the_allowance_is_exhausted():
    """Spent == allowance leaves nothing to run on."""
    d = decide(goal(compute=0.5, window_hours=1), [(60, 1800, 0, 0, 0)])
    assert d.reason is QuotaReason.WINDOW_EXHAUSTED


def test_spend_outside_the_window_does_not_count():
    """A turn that ended more than a window ago is not spend any more."""
    d = decide(goal(compute=0.1, window_hours=1), [(3601, 5000, 0, 0, 0)])
    assert (d.allowed, d.spent_wall_s) == (True, 0.0)


def test_cpu_cap_exhausted():
    """The CPU cap refuses with its own reason and frees when the CPU spend leaves."""
    g = goal(window_hours=1, cpu_seconds=100)
    d = decide(g, [(1800, 10, 80, 0, 0), (60, 10, 30, 0, 0)])
    assert (d.reason, d.spent_cpu_s, d.cpu_allowance_s) == (
        QuotaReason.CPU_BUDGET_EXHAUSTED,
        110,
        100,
    )
    assert d.next_eligible_at == NOW - timedelta(seconds=1800) + timedelta(hours=1)


def test_token_cap_exhausted():
    """Input plus output tokens over the cap refuse the goal."""
    d = decide(goal(window_hours=1, max_tokens=1000), [(120, 1, 1, 1000, 0)])
    assert (d.reason, d.spent_tokens, d.token_allowance) == (
        QuotaReason.TOKEN_BUDGET_EXHAUSTED,
        1000,
        1000,
    )
    assert d.next_eligible_at == NOW - timedelta(seconds=120) + timedelta(hours=1)


def test_cost_cap_exhausted():
    """Reported cost over the cap refuses the goal."""
    d = decide(goal(window_hours=1, max_cost_usd=2.5), [(30, 1, 1, 0, 3.0)])
    assert (d.reason, d.spent_cost_usd) == (QuotaReason.COST_BUDGET_EXHAUSTED, 3.0)
    assert "$3.00" in d.message


def test_low_memory_is_refused_with_both_numbers():
    """Available memory below the guard refuses, naming the numbers and the flag."""
    room = HostHeadroom(available_memory_mb=500, load_1m=0, cpu_count=2, measured_at=NOW)
    d = decide(goal(min_free_memory_mb=1024), headroom=room)
    assert (d.reason, d.next_eligible_at) == (QuotaReason.HOST_MEMORY_LOW, None)
    assert "500 MB" in d.message
    assert "1,024 MB" in d.message


def test_overloaded_host_is_refused_per_cpu():
    """Load 6 on 2 CPUs is 3 per CPU, over a guard of 2."""
    room = HostHeadroom(available_memory_mb=9000, load_1m=6, cpu_count=2, measured_at=NOW)
    d = decide(goal(max_load_per_cpu=2), headroom=room)
    assert d.reason is QuotaReason.HOST_OVERLOADED
    assert "3.00 per CPU" in d.message


def test_load_at_the_guard_is_allowed():
    """A load per CPU equal to the guard is still allowed (the guard is a maximum)."""
    room = HostHeadroom(available_memory_mb=9000, load_1m=4, cpu_count=2, measured_at=NOW)
    assert decide(goal(max_load_per_cpu=2), headroom=room).allowed


def test_next_eligible_at_waits_for_every_time_bound_blocker():
    """Window and CPU both exhausted: eligible when the later of the two frees."""
    g = goal(compute=0.1, window_hours=1, cpu_seconds=50)  # 360 s of wall
    d = decide(g, [(3000, 400, 10, 0, 0), (600, 10, 60, 0, 0)])
    assert d.reason is QuotaReason.WINDOW_EXHAUSTED
    assert d.next_eligible_at == NOW - timedelta(seconds=600) + timedelta(hours=1)


def test_not_yet_eligible_also_waits_for_the_window():
    """A state wait shorter than the window's refill reports the refill time."""
    g = goal(compute=0.1, window_hours=1)
    state = GoalState(goal_id="g", next_eligible_at=NOW + timedelta(seconds=5))
    d = decide(g, [(1200, 400, 0, 0, 0)], state=state)
    assert d.reason is QuotaReason.NOT_YET_ELIGIBLE
    assert d.next_eligible_at == NOW - timedelta(seconds=1200) + timedelta(hours=1)


def test_turns_in_the_same_minute_leave_together():
    """Turns ending within one UTC minute share a bucket and leave at its last end."""
    g = goal(compute=0.1, window_hours=1)  # 360 s
    minute = NOW.replace(second=0) - timedelta(minutes=30)
    first, second = minute + timedelta(seconds=5), minute + timedelta(seconds=50)
    turns = [
        ((NOW - first).total_seconds(), 300, 0, 0, 0),
        ((NOW - second).total_seconds(), 100, 0, 0, 0),
    ]
    d = decide(g, turns)
    assert d.next_eligible_at == second + timedelta(hours=1)


# --- precedence (property) ---------------------------------------------------------------------

ORDER = [
    QuotaReason.DONE,
    QuotaReason.PAUSED,
    QuotaReason.GATE_PENDING,
    QuotaReason.LEASED,
    QuotaReason.NOT_YET_ELIGIBLE,
    QuotaReason.WINDOW_EXHAUSTED,
    QuotaReason.CPU_BUDGET_EXHAUSTED,
    QuotaReason.TOKEN_BUDGET_EXHAUSTED,
    QuotaReason.COST_BUDGET_EXHAUSTED,
    QuotaReason.HOST_MEMORY_LOW,
    QuotaReason.HOST_OVERLOADED,
]


@settings(max_examples=300, deadline=None)
@given(st.sets(st.sampled_from(ORDER)), st.booleans())
def test_the_first_applicable_reason_in_precedence_wins(conditions, pause_by_compute):
    """With any set of conditions true at once, the reason is the earliest in the documented order."""
    status = GoalStatus.ACTIVE
    if QuotaReason.DONE in conditions:
        status = GoalStatus.DONE
    elif QuotaReason.PAUSED in conditions and not pause_by_compute:
        status = GoalStatus.PAUSED
    quota: dict[str, Any] = {"window_hours": 1.0, "compute": 0.1}
    if QuotaReason.PAUSED in conditions and pause_by_compute:
        quota["compute"] = 0.0
    turn_wall = 400.0 if QuotaReason.WINDOW_EXHAUSTED in conditions else 1.0
    if QuotaReason.CPU_BUDGET_EXHAUSTED in conditions:
        quota["cpu_seconds"] = 5.0
    if QuotaReason.TOKEN_BUDGET_EXHAUSTED in conditions:
        quota["max_tokens"] = 10
    if QuotaReason.COST_BUDGET_EXHAUSTED in conditions:
        quota["max_cost_usd"] = 0.5
    if QuotaReason.HOST_MEMORY_LOW in conditions:
        quota["min_free_memory_mb"] = 100_000
    if QuotaReason.HOST_OVERLOADED in conditions:
        quota["max_load_per_cpu"] = 0.1
    state = GoalState(
        goal_id="g",
        gates=with_gate().gates if QuotaReason.GATE_PENDING in conditions else [],
        next_eligible_at=NOW + timedelta(minutes=1)
        if QuotaReason.NOT_YET_ELIGIBLE in conditions
        else None,
    )
    d = decide(
        goal(status, **quota),
        [(600, turn_wall, 10.0, 20, 1.0)],
        state=state,
        leased=QuotaReason.LEASED in conditions,
    )
    expected = next((r for r in ORDER if r in conditions), QuotaReason.OK)
    assert d.reason is expected
    assert d.allowed is (expected is QuotaReason.OK)
    assert d.message


# --- next_eligible_at is exact (property) ------------------------------------------------------

turns_strategy = st.lists(
    st.tuples(
        st.floats(min_value=0, max_value=7200, allow_nan=False),  # ended this long ago
        st.floats(min_value=0, max_value=900, allow_nan=False),  # wall
        st.floats(min_value=0, max_value=900, allow_nan=False),  # cpu
        st.integers(min_value=0, max_value=5000),  # tokens
        st.floats(min_value=0, max_value=3, allow_nan=False),  # cost
    ),
    max_size=30,
)


@settings(max_examples=300, deadline=None)
@given(
    turns_strategy,
    st.floats(min_value=0.01, max_value=1),
    st.one_of(st.none(), st.floats(min_value=1, max_value=2000)),
    st.one_of(st.none(), st.integers(min_value=1, max_value=20_000)),
    st.one_of(st.none(), st.floats(min_value=0.1, max_value=10)),
)
def test_next_eligible_at_is_the_first_instant_the_goal_may_run(turns, compute, cpu, tokens, cost):
    """At next_eligible_at the goal may run, and a microsecond before it may not."""
    g = goal(compute=compute, window_hours=1, cpu_seconds=cpu, max_tokens=tokens, max_cost_usd=cost)
    # Turns in the past of NOW, seen from later decision times: the spend does not change.
    ended = [(NOW - timedelta(seconds=ago), w, c, t, u) for ago, w, c, t, u in turns]

    def at(when: datetime):
        fold = BucketFold()
        for e, w, c, t, u in ended:
            fold.add(e, wall_s=w, cpu_s=c, tokens=t, cost_usd=u)
        s = window_of(
            fold.columns(), window_start=when - timedelta(hours=1), lifetime=fold.lifetime
        )
        return should_run(g, GoalState(goal_id="g"), s, ROOMY, leased=False, now=when)

    d = at(NOW)
    if d.allowed:
        assert d.next_eligible_at is None
        return
    assert d.next_eligible_at is not None
    assert d.next_eligible_at > NOW
    assert at(d.next_eligible_at).allowed
    assert not at(d.next_eligible_at - timedelta(microseconds=1)).allowed
    assert math.isclose(d.spent_wall_s, sum(spend(turns, window_hours=1).buckets.wall_s))
