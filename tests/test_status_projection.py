"""The pure status projection: one rule per test, then ordering and overlays."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from loopx.fleet import AgentSlot, FleetRecord
from loopx.quota.window import BucketFold, SpendColumns
from loopx.registry.goalrecords import GoalStatus
from loopx.registry.quota_policy import QuotaPolicy
from loopx.state import GoalState
from loopx.status.fleetview import fleet_view
from loopx.status.inputs import GoalInputs
from loopx.status.projection import project_goal
from loopx.status.queue import project
from loopx.status.view import Actor, StatusReason
from loopx.testing.status_fixtures import history_line, make_goal, open_gate_state
from loopx.turn.outcome import ResultKind

NOW = datetime(2026, 1, 2, 12, 0, tzinfo=UTC)
WORKDIR = Path("/tmp")


def goal(goal_id: str = "g1", **fields: object):
    return make_goal(goal_id, now=NOW - timedelta(days=1), workdir=WORKDIR, **fields)


def lease_for(goal_id: str, *, expires_in: float, agent_id: str = "agent-1"):
    from loopx.turn.lease import Lease

    return Lease(
        goal_id=goal_id,
        agent_id=agent_id,
        pid=1,
        pid_started_at=0.0,
        hostname="h",
        epoch=3,
        acquired_at=NOW - timedelta(seconds=20),
        renewed_at=NOW,
        expires_at=NOW + timedelta(seconds=expires_in),
    )


def view(inputs: GoalInputs):
    return project_goal(inputs, now=NOW)


def test_fresh_goal_is_ready_for_an_agent():
    """A goal with nothing against it is agent/ready."""
    v = view(GoalInputs(goal=goal()))
    assert (v.actor, v.reason) == (Actor.AGENT, StatusReason.READY)


def test_open_gate_needs_a_human():
    """An open gate makes the goal human/gate_pending with the question shown."""
    v = view(GoalInputs(goal=goal(), state=open_gate_state("g1", "Ship it?", now=NOW)))
    assert (v.actor, v.reason, v.gate_question) == (
        Actor.HUMAN,
        StatusReason.GATE_PENDING,
        "Ship it?",
    )


def test_live_lease_is_running():
    """A live lease makes the goal agent/running with the holder shown."""
    v = view(GoalInputs(goal=goal(), lease=lease_for("g1", expires_in=30)))
    assert (v.actor, v.reason, v.lease.agent_id, v.lease.expired) == (
        Actor.AGENT,
        StatusReason.RUNNING,
        "agent-1",
        False,
    )
    assert v.recheck_at == NOW + timedelta(seconds=30)


def test_expired_lease_warns():
    """An expired lease is still running (a takeover comes) and carries a warning."""
    v = view(GoalInputs(goal=goal(), lease=lease_for("g1", expires_in=-5)))
    assert v.reason is StatusReason.RUNNING
    assert v.lease.expired
    assert any("expired" in w for w in v.warnings)


def test_paused_goal_needs_a_human():
    """A paused goal is human/paused."""
    v = view(GoalInputs(goal=goal(status=GoalStatus.PAUSED)))
    assert (v.actor, v.reason) == (Actor.HUMAN, StatusReason.PAUSED)


def test_zero_compute_is_a_pause():
    """Quota compute 0 is a hard pause a human must lift."""
    v = view(GoalInputs(goal=goal(quota=QuotaPolicy(compute=0.0))))
    assert (v.actor, v.reason) == (Actor.HUMAN, StatusReason.PAUSED)


def test_done_goal_is_quiet():
    """A done goal is none/done."""
    v = view(GoalInputs(goal=goal(status=GoalStatus.DONE)))
    assert (v.actor, v.reason) == (Actor.NONE, StatusReason.DONE)


def test_a_gate_open_on_a_done_goal_needs_a_human():
    """A done goal's open gate (a merge's, the base having moved) is not quiet: it asks."""
    state = open_gate_state("g1", "the base moved; merge again?", now=NOW)
    v = view(GoalInputs(goal=goal(status=GoalStatus.DONE), state=state))
    assert (v.actor, v.reason, v.gate_question) == (
        Actor.HUMAN,
        StatusReason.GATE_PENDING,
        "the base moved; merge again?",
    )
    assert v.explanation.startswith("done, and gate 1 waits for an answer")


def test_completed_last_turn_is_done():
    """A last turn of kind completed makes the goal done even before the registry says so."""
    h = [history_line("g1", 1, ended_at=NOW, kind=ResultKind.COMPLETED)]
    v = view(GoalInputs(goal=goal(), history=h))
    assert (v.actor, v.reason, v.last_turn.kind) == (
        Actor.NONE,
        StatusReason.DONE,
        ResultKind.COMPLETED,
    )


def test_quarantined_journal_needs_a_human():
    """A journal of the goal in quarantine/ makes it human/quarantined."""
    v = view(GoalInputs(goal=goal(), quarantined=("g1__t1.json",)))
    assert (v.actor, v.reason, v.quarantined) == (
        Actor.HUMAN,
        StatusReason.QUARANTINED,
        ["g1__t1.json"],
    )


def test_damaged_file_needs_a_human():
    """A damaged file is reported as quarantined, with the damage in the warnings."""
    v = view(GoalInputs(goal=goal(), damage=("state.json is damaged: not JSON",)))
    assert (v.actor, v.reason) == (Actor.HUMAN, StatusReason.QUARANTINED)
    assert "state.json is damaged: not JSON" in v.warnings


@pytest.mark.parametrize(
    "inputs",
    [
        GoalInputs(goal=goal()),
        GoalInputs(goal=goal(status=GoalStatus.PAUSED, priority=7)),
        GoalInputs(goal=goal(status=GoalStatus.DONE)),
        GoalInputs(goal=goal(quota=QuotaPolicy(compute=0.0))),
        GoalInputs(goal=goal(quota=QuotaPolicy(compute=0.5, window_hours=2, cpu_seconds=9))),
        GoalInputs(goal=goal(objective="x" * 300)),
        GoalInputs(goal=goal(), quarantined=("g1__t1.json",)),
        GoalInputs(goal=goal(), damage=("lease.json is damaged: not JSON",)),
    ],
    ids=["ready", "paused", "done", "compute0", "policy", "long", "quarantined", "damaged"],
)
def test_never_ran_view_equals_a_validated_one(inputs: GoalInputs):
    """A goal that never ran (assembled without validation) gets the validated view it would."""
    # Given a goal without state, lease, history or spend (the unvalidated path),
    # and the same goal with an empty state (the validated path's every rule)
    quick = view(inputs)
    checked = view(dataclasses.replace(inputs, state=GoalState(goal_id="g1")))
    # Then both agree, field by field and byte by byte, with a validated copy
    assert quick == checked == type(quick).model_validate(quick.model_dump())
    assert quick.model_dump_json(indent=2) == checked.model_dump_json(indent=2)
    assert quick.model_fields_set == checked.model_fields_set


def _spent(seconds: float) -> SpendColumns:
    fold = BucketFold()
    fold.add(NOW - timedelta(minutes=5), wall_s=seconds, cpu_s=seconds / 2, tokens=10, cost_usd=0.1)
    return fold.columns()


@pytest.mark.parametrize(
    "inputs",
    [
        GoalInputs(
            goal=goal(),
            state=GoalState(goal_id="g1", turn_seq=4, next_action="write the tests"),
            history=[
                history_line("g1", 3, ended_at=NOW - timedelta(minutes=9)),
                history_line("g1", 4, ended_at=NOW, next_action="ship it"),
            ],
            spend=_spent(60.0),
        ),
        GoalInputs(goal=goal(), lease=lease_for("g1", expires_in=-5.0)),
        GoalInputs(
            goal=goal(quota=QuotaPolicy(compute=0.01, window_hours=1)),
            state=open_gate_state("g1", "Ship it?", now=NOW),
            spend=_spent(3600.0),
        ),
    ],
    ids=["ran", "expired-lease", "gate-and-spent"],
)
def test_the_view_of_a_goal_that_ran_equals_a_validated_one(inputs: GoalInputs):
    """A goal with state, lease, history or spend: its assembled view is what validation gives."""
    v = view(inputs)
    again = type(v).model_validate_json(v.model_dump_json())
    assert v == again == type(v).model_validate(v.model_dump())
    assert v.model_dump_json(indent=2) == again.model_dump_json(indent=2)
    assert v.model_fields_set == again.model_fields_set
    for nested in (v.lease, v.last_turn):
        if nested is not None:
            assert nested == type(nested).model_validate(nested.model_dump())


def test_repeated_failures_need_a_human():
    """Three failed turns in a row make the goal human/failing."""
    state = GoalState(goal_id="g1", consecutive_failures=3)
    h = [history_line("g1", 3, ended_at=NOW, kind=None, status="failed", failure="host_exit")]
    v = view(GoalInputs(goal=goal(), state=state, history=h))
    assert (v.actor, v.reason) == (Actor.HUMAN, StatusReason.FAILING)
    assert "host_exit" in v.explanation


def test_one_failure_is_retried_by_an_agent():
    """A single failure is agent/failing with the retry time."""
    later = NOW + timedelta(minutes=5)
    state = GoalState(goal_id="g1", consecutive_failures=1, next_eligible_at=later)
    v = view(GoalInputs(goal=goal(), state=state))
    assert (v.actor, v.reason, v.next_eligible_at) == (Actor.AGENT, StatusReason.FAILING, later)


def spent(*turns: tuple[datetime, float, float]) -> SpendColumns:
    """The ledger's minute buckets of turns given as (ended_at, wall_s, cpu_s)."""
    fold = BucketFold()
    for ended_at, wall_s, cpu_s in turns:
        fold.add(ended_at, wall_s=wall_s, cpu_s=cpu_s, tokens=0, cost_usd=0.0)
    return fold.columns()


def test_spent_window_is_quota_exhausted_until_refill():
    """A spent wall-time allowance is none/quota_exhausted until the oldest spend leaves."""
    policy = QuotaPolicy(compute=0.01, window_hours=1.0)  # 36 s per hour
    spend = spent(
        (NOW - timedelta(minutes=50), 20.0, 0.0),
        (NOW - timedelta(minutes=10), 20.0, 0.0),
    )
    v = view(GoalInputs(goal=goal(quota=policy), spend=spend))
    assert (v.actor, v.reason, v.quota.exhausted) == (
        Actor.NONE,
        StatusReason.QUOTA_EXHAUSTED,
        "wall",
    )
    assert v.next_eligible_at == NOW + timedelta(minutes=10)
    assert (v.quota.spent_wall_s, v.quota.turns_in_window) == (40.0, 2)


def test_spend_outside_the_window_does_not_count():
    """Spend that ended before the window start is ignored."""
    policy = QuotaPolicy(compute=0.01, window_hours=1.0)
    spend = spent((NOW - timedelta(hours=2), 500.0, 0.0))
    v = view(GoalInputs(goal=goal(quota=policy), spend=spend))
    assert (v.reason, v.quota.spent_wall_s) == (StatusReason.READY, 0.0)


def test_cpu_cap_exhausts():
    """A cpu_seconds cap is checked too."""
    policy = QuotaPolicy(cpu_seconds=10.0)
    spend = spent((NOW - timedelta(minutes=1), 1.0, 12.0))
    v = view(GoalInputs(goal=goal(quota=policy), spend=spend))
    assert (v.reason, v.quota.exhausted) == (StatusReason.QUOTA_EXHAUSTED, "cpu")


def test_future_eligibility_is_waiting():
    """A next_eligible_at in the future (a wait result) is none/waiting."""
    later = NOW + timedelta(hours=1)
    v = view(GoalInputs(goal=goal(), state=GoalState(goal_id="g1", next_eligible_at=later)))
    assert (v.actor, v.reason, v.next_eligible_at, v.recheck_at) == (
        Actor.NONE,
        StatusReason.WAITING,
        later,
        later,
    )


def test_next_action_disagreement_warns():
    """The state's next action differing from the last run's recommendation is a warning."""
    state = GoalState(goal_id="g1", next_action="write the tests")
    h = [history_line("g1", 1, ended_at=NOW, next_action="fix the build")]
    v = view(GoalInputs(goal=goal(), state=state, history=h))
    assert any("disagrees" in w for w in v.warnings)


def test_same_next_action_modulo_spacing_does_not_warn():
    """Whitespace and case differences are not a disagreement."""
    state = GoalState(goal_id="g1", next_action="Fix  the build")
    h = [history_line("g1", 1, ended_at=NOW, next_action="fix the build")]
    assert view(GoalInputs(goal=goal(), state=state, history=h)).warnings == []


def _fleet(*, looping: list[bool]) -> FleetRecord:
    slots = [
        AgentSlot(index=i, agent_id=f"agent-{i + 1}", crash_loop=c, restarts=2)
        for i, c in enumerate(looping)
    ]
    return FleetRecord(
        pid=1,
        pid_started_at=0.0,
        hostname="h",
        agents_wanted=len(slots),
        started_at=NOW,
        updated_at=NOW,
        slots=slots,
    )


def test_all_agents_crash_looping_marks_ready_goals():
    """When every agent slot crash-loops, a ready goal is human/crash_loop."""
    p = project(
        [GoalInputs(goal=goal())],
        fleet=_fleet(looping=[True, True]),
        heartbeats=[],
        quarantined_total=0,
        now=NOW,
    )
    assert (p.goals[0].actor, p.goals[0].reason) == (Actor.HUMAN, StatusReason.CRASH_LOOP)
    assert p.fleet.restarts == 4


def test_one_healthy_agent_keeps_goals_ready():
    """With one healthy slot left, a ready goal stays ready."""
    p = project(
        [GoalInputs(goal=goal())],
        fleet=_fleet(looping=[True, False]),
        heartbeats=[],
        quarantined_total=0,
        now=NOW,
    )
    assert p.goals[0].reason is StatusReason.READY


def test_lease_held_by_crash_looping_agent_is_crash_loop():
    """A goal leased by a crash-looping agent is human/crash_loop."""
    p = project(
        [GoalInputs(goal=goal(), lease=lease_for("g1", expires_in=30, agent_id="agent-1"))],
        fleet=_fleet(looping=[True, False]),
        heartbeats=[],
        quarantined_total=0,
        now=NOW,
    )
    assert p.goals[0].reason is StatusReason.CRASH_LOOP


def test_order_is_humans_then_agents_then_quiet():
    """The queue lists humans first, then agents, then quiet goals; priority breaks ties."""
    inputs = [
        GoalInputs(goal=goal("quiet", status=GoalStatus.DONE)),
        GoalInputs(goal=goal("low", priority=0)),
        GoalInputs(goal=goal("high", priority=5)),
        GoalInputs(goal=goal("gate"), state=open_gate_state("gate", "?", now=NOW)),
    ]
    p = project(inputs, fleet=None, heartbeats=[], quarantined_total=0, now=NOW)
    assert [g.goal_id for g in p.goals] == ["gate", "high", "low", "quiet"]
    assert p.counts.by_actor == {"agent": 2, "human": 1, "none": 1}


def test_archived_goals_are_left_out():
    """Archived goals are not in the attention queue."""
    p = project(
        [GoalInputs(goal=goal(status=GoalStatus.ARCHIVED))],
        fleet=None,
        heartbeats=[],
        quarantined_total=0,
        now=NOW,
    )
    assert p.goals == []


def test_no_supervisor_fleet_view():
    """Without supervisor.json the fleet view says so and counts no agents."""
    f = fleet_view(None, [], now=NOW)
    assert (f.state, f.agents_alive, f.crash_loop_agents) == (None, 0, [])


@pytest.mark.parametrize("reason", list(StatusReason))
def test_every_reason_code_has_a_rank(reason):
    """Every reason code can be ordered (the queue never fails on a new code)."""
    from loopx.status.queue import _REASON_RANK

    assert reason in _REASON_RANK


def test_a_stop_after_a_failure_is_not_named_a_failure():
    """A stopped last turn after one failure does not read "latest: stopped"."""
    state = GoalState(goal_id="g1", consecutive_failures=1)
    stopped = history_line("g1", 2, ended_at=NOW, kind=None, status="stopped", failure="stopped")
    v = view(GoalInputs(goal=goal(), state=state, history=[stopped]))
    assert v.reason is StatusReason.FAILING
    assert "latest: stopped" not in v.explanation
    assert "stopped, not failed" in v.explanation
