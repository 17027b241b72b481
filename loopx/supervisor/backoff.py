"""Restart policy: how long to wait before restarting an agent, and when restarts are a crash loop.

Pure functions of the restart times and ``now``; the fleet performs the
restarts. The exponential delay is tenacity's ``wait_exponential`` (the same
curve the file locks use), evaluated for the number of recent restarts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tenacity import RetryCallState, wait_exponential


@dataclass(frozen=True, slots=True)
class RestartPolicy:
    """When to restart a dead agent.

    Attributes:
        base_s: delay before the first restart of a quiet slot.
        max_s: the longest delay; also the delay used while in a crash loop.
        window_s: restarts older than this are forgotten (the crash-loop window).
        crash_loop_restarts: this many restarts inside the window is a crash loop.

    """

    base_s: float = 0.5
    max_s: float = 60.0
    window_s: float = 120.0
    crash_loop_restarts: int = 5


@dataclass(frozen=True, slots=True)
class RestartDecision:
    """What to do about a slot whose agent died."""

    delay_s: float
    recent_restarts: int  # restarts inside the window, this one included
    crash_loop: bool


def recent(restart_times: Sequence[float], *, now: float, window_s: float) -> list[float]:
    """The restart times (monotonic seconds) inside the window ending at ``now``."""
    return [t for t in restart_times if now - t < window_s]


def exponential_delay(policy: RestartPolicy, attempt: int) -> float:
    """Delay before restart number ``attempt`` (1-based) of a burst: base * 2**(attempt-1), capped."""
    wait = wait_exponential(multiplier=policy.base_s, min=policy.base_s, max=policy.max_s)
    state = RetryCallState(retry_object=None, fn=None, args=(), kwargs={})  # type: ignore[arg-type]
    state.attempt_number = max(1, attempt)
    return float(wait(state))


def decide_restart(
    policy: RestartPolicy, restart_times: Sequence[float], *, now: float
) -> RestartDecision:
    """Delay and crash-loop flag for one more restart, given the earlier restart times.

    A slot that stayed up longer than the window has no recent restarts and
    restarts after ``base_s``; each further restart inside the window doubles
    the delay; ``crash_loop_restarts`` of them mark a crash loop, which waits
    ``max_s`` between tries and is shown to a human.
    """
    count = len(recent(restart_times, now=now, window_s=policy.window_s)) + 1
    crash_loop = count >= policy.crash_loop_restarts
    delay = policy.max_s if crash_loop else exponential_delay(policy, count)
    return RestartDecision(delay_s=delay, recent_restarts=count, crash_loop=crash_loop)
