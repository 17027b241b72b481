"""What a host run may use, and the pure decisions of watching it.

:func:`kill_reason` says whether a running host must be killed now,
:func:`next_period` when its tree is sampled next, :func:`next_wait` how long
the pipes are served before looking again. :mod:`loopx.agents.hostrun` runs
the host and acts on them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from loopx.turn.failures import FailureReason

DEFAULT_KILL_GRACE_S: Final = 3.0
MB: Final = 1024 * 1024
# The tree is looked at first after 10 ms (short hosts are common), then at
# doubling intervals, up to 0.1 s while it changes and 1 s while it is quiet
# (:func:`next_period`). A stop request is checked every 50 ms in the host's
# first second, every 0.25 s after: each check is a wake-up of this process,
# which costs more than the check (about 0.1 ms on a loaded machine).
FIRST_SAMPLE_S: Final = 0.01
_BUSY_PERIOD_S: Final = 0.1
_QUIET_PERIOD_S: Final = 1.0
_STOP_CHECK_S: Final = 0.05
_STOP_CHECK_LATER_S: Final = 0.25
_STOP_CHECK_FAST_FOR_S: Final = 1.0


@dataclass(frozen=True, slots=True)
class Limits:
    """Enforcement limits of one host run."""

    timeout_s: float
    max_rss_mb: float | None = None
    kill_grace_s: float = DEFAULT_KILL_GRACE_S
    stall_timeout_s: float | None = None  # no output for this long: stalled (None: never)
    # Files or folders the host is known to write (its session records): a file in them
    # modified within the stall timeout is a sign of life too.
    activity_paths: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Observation:
    """What the watch loop knows of a running host when it wakes (RSS: the last sample)."""

    elapsed_s: float
    rss_bytes: int
    stop_requested: bool
    quiet_s: float = 0.0  # since the host last wrote to stdout or stderr (or started)


def kill_reason(seen: Observation, limits: Limits) -> FailureReason | None:
    """Why a running host must be killed now, or None to let it run. Pure."""
    if seen.stop_requested:
        return FailureReason.STOPPED
    if seen.elapsed_s > limits.timeout_s:
        return FailureReason.TURN_TIMEOUT
    if limits.stall_timeout_s is not None and seen.quiet_s > limits.stall_timeout_s:
        return FailureReason.HOST_STALLED
    if limits.max_rss_mb is not None and seen.rss_bytes > limits.max_rss_mb * MB:
        return FailureReason.QUOTA_MEMORY_EXCEEDED
    return None


def next_period(period: float, *, changed: bool, near_cap: bool) -> float:
    """How long from this sample of the tree to the next. Pure.

    The period doubles: up to 0.1 s while the tree changes (a process came or
    went, the summed RSS moved by more than an eighth) or holds more than
    half its memory cap, up to 1 s while it is quiet. A change after a quiet
    spell brings it back to 0.1 s at once.
    """
    return min(period * 2, _BUSY_PERIOD_S if changed or near_cap else _QUIET_PERIOD_S)


def next_wait(until_due_s: float, elapsed_s: float, limits: Limits, *, stoppable: bool) -> float:
    """How long to serve the pipes before looking again. Pure.

    Until the next sample or tick is due (``until_due_s``), never past the
    timeout; when a stop may be requested, at most 50 ms in the host's first
    second and 0.25 s after (checking the stop costs a wake-up, not a sample).
    """
    wait = min(max(until_due_s, 0.0), max(limits.timeout_s - elapsed_s, 0.0) + 0.001)
    if not stoppable:
        return wait
    fast = elapsed_s < _STOP_CHECK_FAST_FOR_S
    return min(wait, _STOP_CHECK_S if fast else _STOP_CHECK_LATER_S)
