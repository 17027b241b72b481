"""Pure supervisor decisions: restart backoff, crash loops, and the until-idle verdict."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from loopx import exitcodes
from loopx.registry.goalrecords import GoalStatus
from loopx.supervisor.backoff import RestartPolicy, decide_restart, exponential_delay
from loopx.supervisor.idle import GoalProgress, Outcome, idle_verdict

NOW = datetime(2026, 1, 1, tzinfo=UTC)
HORIZON = timedelta(seconds=60)


def test_backoff_doubles_and_caps() -> None:
    """Delays double from base and stop at max."""
    policy = RestartPolicy(base_s=0.5, max_s=4.0)
    assert [exponential_delay(policy, n) for n in range(1, 6)] == [0.5, 1.0, 2.0, 4.0, 4.0]


def test_old_restarts_are_forgotten() -> None:
    """A restart outside the window does not count toward the next delay."""
    policy = RestartPolicy(base_s=1.0, window_s=10.0)
    assert decide_restart(policy, [0.0], now=100.0).delay_s == 1.0
    assert decide_restart(policy, [95.0], now=100.0).delay_s == 2.0


def test_crash_loop_after_n_restarts_in_window() -> None:
    """The Nth restart inside the window is a crash loop and waits max_s."""
    policy = RestartPolicy(base_s=0.1, max_s=30.0, window_s=60.0, crash_loop_restarts=3)
    assert not decide_restart(policy, [1.0], now=2.0).crash_loop
    decision = decide_restart(policy, [1.0, 2.0], now=3.0)
    assert (decision.crash_loop, decision.delay_s, decision.recent_restarts) == (True, 30.0, 3)


def test_until_idle_all_done_is_0() -> None:
    """Every goal done: idle, exit 0."""
    verdict = idle_verdict([GoalProgress("a", GoalStatus.DONE)], now=NOW, horizon=HORIZON)
    assert (verdict.idle, verdict.exit_code) == (True, 0)


def test_until_idle_eligible_goal_is_progress() -> None:
    """An active eligible goal keeps the fleet busy."""
    verdict = idle_verdict([GoalProgress("a", GoalStatus.ACTIVE)], now=NOW, horizon=HORIZON)
    assert not verdict.idle


def test_until_idle_gate_is_2_and_failure_wins() -> None:
    """An open gate gives 2; a failed goal beside it gives 1."""
    gate = GoalProgress("a", GoalStatus.ACTIVE, open_gates=1)
    failed = GoalProgress("b", GoalStatus.ACTIVE, quota_allowed=False, last_failed=True)
    assert idle_verdict([gate], now=NOW, horizon=HORIZON).exit_code == exitcodes.NEEDS_HUMAN
    verdict = idle_verdict([gate, failed], now=NOW, horizon=HORIZON)
    assert (verdict.exit_code, verdict.outcomes["b"]) == (1, Outcome.FAILED)


def test_until_idle_far_wait_is_not_progress() -> None:
    """A goal eligible only beyond the horizon (quota or wait) does not keep the run alive."""
    far = GoalProgress("a", GoalStatus.ACTIVE, eligible_at=NOW + timedelta(hours=2))
    near = GoalProgress("b", GoalStatus.ACTIVE, eligible_at=NOW + timedelta(seconds=5))
    quota = GoalProgress(
        "c", GoalStatus.ACTIVE, quota_allowed=False, quota_next_eligible_at=NOW + timedelta(hours=1)
    )
    assert idle_verdict([far, quota], now=NOW, horizon=HORIZON).exit_code == exitcodes.NEEDS_HUMAN
    assert not idle_verdict([far, near], now=NOW, horizon=HORIZON).idle


def test_until_idle_running_goal_is_progress_and_dead_fleet_fails() -> None:
    """A leased goal is progress, unless every agent is in a crash loop (exit 1)."""
    running = GoalProgress("a", GoalStatus.ACTIVE, running=True)
    assert not idle_verdict([running], now=NOW, horizon=HORIZON).idle
    verdict = idle_verdict([running], now=NOW, horizon=HORIZON, fleet_dead=True)
    assert (verdict.idle, verdict.exit_code) == (True, 1)
