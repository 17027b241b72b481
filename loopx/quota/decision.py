"""Compute quota decisions: may this goal run a turn now, and if not, why and until when.

:func:`should_run` is pure: policy, goal state, the window's spend and a
host-headroom snapshot in, a :class:`QuotaDecision` out. :func:`decide` is
the I/O shell the turn engine calls before each turn: it loads the state,
sums the window from the ledger's aggregate and measures the host.

The allowance of share ``compute`` over a window of ``window_hours`` is
``compute x window_hours x 3600`` seconds of turn wall time (a duty cycle);
optional caps bound CPU seconds, tokens and cost per window. The window is
the sliding interval ``(now - window_hours, now]``; spend leaves it as
described in :mod:`loopx.quota.window`.

Refusals are checked in this order and the first that applies is the
reason (``done`` and ``paused`` need a human to change the goal, so they
come before anything that would clear by itself):

1. ``done``: status done (or archived).
2. ``paused``: status paused, or ``compute`` is 0.
3. ``gate_pending``: the state has an open gate.
4. ``leased``: another turn holds the goal's lease.
5. ``not_yet_eligible``: ``state.next_eligible_at`` is in the future.
6. ``window_exhausted``: window wall time spent >= allowance.
7. ``cpu_budget_exhausted``: window CPU seconds >= ``cpu_seconds``.
8. ``token_budget_exhausted``: window tokens >= ``max_tokens``.
9. ``cost_budget_exhausted``: window cost >= ``max_cost_usd``.
10. ``host_memory_low``: available memory < ``min_free_memory_mb``.
11. ``host_overloaded``: 1-minute load per CPU > ``max_load_per_cpu``.

``next_eligible_at`` of a refusal by reasons 5 to 9 is the earliest instant
at which *every* time-bound blocker known now has cleared (the state's
``next_eligible_at`` and each exhausted budget's instant of enough old
spend leaving the window), assuming nothing new is spent; it is exact under
the bucket rule. Reasons 1 to 4 and 10 to 11 wait on a human, another turn
or the host, so they carry None.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Final, Literal, NamedTuple

from loopx.model import Record, UtcDatetime, iso_utc
from loopx.quota.budget import Budget, QuotaRemaining, QuotaView, quota_view, remaining_of
from loopx.quota.headroom import HostHeadroom, measure_headroom
from loopx.quota.ledger import window_spend
from loopx.quota.phrases import in_phrase, seconds_phrase, should_run_line
from loopx.quota.window import WindowSpend, leaves_at
from loopx.registry.goalrecords import Goal, GoalStatus
from loopx.registry.quota_policy import QuotaPolicy
from loopx.root import Layout
from loopx.state import GoalState, load_state

__all__ = [
    "DecisionInputs",
    "HostHeadroom",
    "QuotaDecision",
    "QuotaReason",
    "QuotaRemaining",
    "WindowSpend",
    "decide",
    "gather_inputs",
    "holds_until",
    "should_run",
]


class QuotaReason(StrEnum):
    """Why a goal may or may not run now."""

    OK = "ok"
    PAUSED = "paused"
    WINDOW_EXHAUSTED = "window_exhausted"
    CPU_BUDGET_EXHAUSTED = "cpu_budget_exhausted"
    TOKEN_BUDGET_EXHAUSTED = "token_budget_exhausted"  # noqa: S105 - a reason code, not a secret
    COST_BUDGET_EXHAUSTED = "cost_budget_exhausted"
    HOST_MEMORY_LOW = "host_memory_low"
    HOST_OVERLOADED = "host_overloaded"
    GATE_PENDING = "gate_pending"
    LEASED = "leased"
    NOT_YET_ELIGIBLE = "not_yet_eligible"
    DONE = "done"
    # The goal's account refuses (limited, overloaded, probing, needs a human):
    # decided by loopx.accounts.rules after the goal's own quota allowed the turn.
    ACCOUNT_WAITING = "account_waiting"
    # The canary quarantined the goal's host kind (loopx.hostcanary): its CLI drifted.
    HOST_QUARANTINED = "host_quarantined"


class QuotaDecision(Record):
    """The typed answer of ``should_run``; recorded in each turn journal's plan."""

    schema_version: Literal[1] = 1
    allowed: bool
    reason: QuotaReason
    message: str  # one human sentence explaining the decision with its numbers
    next_eligible_at: UtcDatetime | None = None
    window_start: UtcDatetime
    allowance_wall_s: float
    spent_wall_s: float
    remaining_wall_s: float
    cpu_allowance_s: float | None = None
    spent_cpu_s: float = 0.0
    spent_tokens: int = 0
    spent_cost_usd: float = 0.0
    decided_at: UtcDatetime
    # Added with the quota engine; defaults keep older journals readable.
    window_hours: float | None = None
    spent_turns: int = 0
    token_allowance: int | None = None
    cost_allowance_usd: float | None = None
    headroom: HostHeadroom | None = None

    def line(self) -> str:
        """The line `loopx quota should-run` prints without --json: ``yes (ok): ...``."""
        return should_run_line(allowed=self.allowed, reason=self.reason, message=self.message)


_REFUSAL: Final = {
    Budget.WALL: QuotaReason.WINDOW_EXHAUSTED,
    Budget.CPU: QuotaReason.CPU_BUDGET_EXHAUSTED,
    Budget.TOKENS: QuotaReason.TOKEN_BUDGET_EXHAUSTED,
    Budget.COST: QuotaReason.COST_BUDGET_EXHAUSTED,
}


# --- the pure decision -------------------------------------------------------------------------


def _hours(value: float) -> str:
    return f"{value:g} h"


def _when(at: datetime, now: datetime) -> str:
    return f"{iso_utc(at, 'seconds')} {in_phrase(at, now)}"


def _exhausted_sentence(budget: Budget, policy: QuotaPolicy, view: QuotaView) -> str:
    span = f"{_hours(policy.window_hours)} window"
    if budget is Budget.WALL:
        return (
            f"spent {seconds_phrase(view.spent_wall_s)} of turn wall time, its allowance is "
            f"{seconds_phrase(view.allowance_wall_s)} (compute {policy.compute:g} x {span})"
        )
    if budget is Budget.CPU:
        return (
            f"spent {view.spent_cpu_s:,.1f} CPU-s of its cap of {policy.cpu_seconds or 0:,.1f} "
            f"CPU-s per {span}"
        )
    if budget is Budget.TOKENS:
        cap = policy.max_tokens or 0
        return f"spent {view.spent_tokens:,} tokens of its cap of {cap:,} per {span}"
    return (
        f"spent ${view.spent_cost_usd:,.2f} of its cap of ${policy.max_cost_usd or 0:,.2f} "
        f"per {span}"
    )


class _Refusal(NamedTuple):
    """A refusal's reason, its sentence, and when it clears by itself (None: it does not)."""

    reason: QuotaReason
    message: str
    at: datetime | None = None


def should_run(
    goal: Goal,
    state: GoalState,
    spend: WindowSpend,
    headroom: HostHeadroom,
    *,
    leased: bool,
    now: datetime,
) -> QuotaDecision:
    """Decide whether ``goal`` may run a turn at ``now``. Pure.

    Args:
        goal: the goal's registry entry (status and quota policy).
        state: the goal's state (open gates, ``next_eligible_at``).
        spend: the goal's spend in the window ``(now - window_hours, now]``.
        headroom: the host's memory and load, measured just before.
        leased: whether another turn holds the goal's lease.
        now: the decision time.

    Returns:
        The decision: the first refusal of the module's precedence, or ``ok``.
    """
    policy = goal.quota
    view = quota_view(policy, spend, now=now)
    numbers = _numbers(policy, view, headroom, now=now)
    who = f"goal {goal.id}"
    # The module's precedence: each group is asked only when the ones before it allow.
    refusal = (
        _waits_on_someone(goal, state, who=who, leased=leased)
        or _waits_on_time(policy, state, view, who=who, now=now)
        or _waits_on_host(policy, headroom, who=who)
    )
    if refusal is not None:
        return QuotaDecision.model_validate(
            {
                "allowed": False,
                "reason": refusal.reason,
                "message": refusal.message,
                "next_eligible_at": refusal.at,
            }
            | numbers
        )
    return QuotaDecision.model_validate(
        {"allowed": True, "reason": QuotaReason.OK, "message": _may_run(policy, spend, view, who)}
        | numbers
    )


def _numbers(
    policy: QuotaPolicy, view: QuotaView, headroom: HostHeadroom, *, now: datetime
) -> dict[str, object]:
    """The window's numbers every decision carries, allowed or not. Pure."""
    return {
        "window_start": view.window_start,
        "window_hours": policy.window_hours,
        "allowance_wall_s": view.allowance_wall_s,
        "spent_wall_s": view.spent_wall_s,
        "remaining_wall_s": view.remaining_wall_s,
        "cpu_allowance_s": policy.cpu_seconds,
        "spent_cpu_s": view.spent_cpu_s,
        "spent_tokens": view.spent_tokens,
        "spent_cost_usd": view.spent_cost_usd,
        "spent_turns": view.turns_in_window,
        "token_allowance": policy.max_tokens,
        "cost_allowance_usd": policy.max_cost_usd,
        "headroom": headroom,
        "decided_at": now,
    }


def _waits_on_someone(goal: Goal, state: GoalState, *, who: str, leased: bool) -> _Refusal | None:
    """Reasons 1 to 4: the goal is done or paused, a gate is open, another turn runs it. Pure."""
    policy = goal.quota
    if goal.status in (GoalStatus.DONE, GoalStatus.ARCHIVED):
        return _Refusal(QuotaReason.DONE, f"{who} is {goal.status}; it runs no more turns")
    if goal.status is GoalStatus.PAUSED:
        return _Refusal(
            QuotaReason.PAUSED, f"{who} is paused; resume it with `loopx goal resume {goal.id}`"
        )
    if policy.compute == 0:
        return _Refusal(
            QuotaReason.PAUSED,
            f"{who} has a compute share of 0, which pauses it; "
            f"raise --quota-compute above 0 to let it run",
        )
    if gates := state.open_gates:
        gate = gates[0]
        question = gate.question if len(gate.question) <= 80 else gate.question[:77] + "..."  # noqa: PLR2004
        more = f" (and {len(gates) - 1} more)" if len(gates) > 1 else ""
        return _Refusal(
            QuotaReason.GATE_PENDING,
            f"{who} waits for a human to answer gate {gate.id}{more}: {question!r}",
        )
    if leased:
        return _Refusal(QuotaReason.LEASED, f"{who} is leased: another agent's turn is running it")
    return None


def _waits_on_time(
    policy: QuotaPolicy, state: GoalState, view: QuotaView, *, who: str, now: datetime
) -> _Refusal | None:
    """Reasons 5 to 9: not yet eligible, or a budget of the window spent; each with its time. Pure."""
    not_before = state.eligible_at(now)
    if not_before is not None and not_before > now:
        at = max(not_before, view.refills_at or not_before)
        return _Refusal(
            QuotaReason.NOT_YET_ELIGIBLE,
            f"{who} is not eligible before {iso_utc(not_before, 'seconds')}"
            f"; next eligible at {_when(at, now)}",
            at,
        )
    if view.exhausted is not None and view.refills_at is not None:
        sentence = _exhausted_sentence(view.exhausted, policy, view)
        return _Refusal(
            _REFUSAL[view.exhausted],
            f"{who} {sentence}; enough of it leaves the window at {_when(view.refills_at, now)}",
            view.refills_at,
        )
    return None


def _waits_on_host(policy: QuotaPolicy, headroom: HostHeadroom, *, who: str) -> _Refusal | None:
    """Reasons 10 and 11: the host's memory or load is past the goal's guard. Pure."""
    if policy.min_free_memory_mb is not None and (
        headroom.available_memory_mb < policy.min_free_memory_mb
    ):
        return _Refusal(
            QuotaReason.HOST_MEMORY_LOW,
            f"the host has {headroom.available_memory_mb:,.0f} MB of memory available, below "
            f"{who}'s guard of {policy.min_free_memory_mb:,} MB (--min-free-memory-mb)",
        )
    if policy.max_load_per_cpu is not None and headroom.load_per_cpu > policy.max_load_per_cpu:
        return _Refusal(
            QuotaReason.HOST_OVERLOADED,
            f"the host's 1-minute load {headroom.load_1m:.2f} over {headroom.cpu_count} CPUs is "
            f"{headroom.load_per_cpu:.2f} per CPU, above {who}'s guard of "
            f"{policy.max_load_per_cpu:g} (--max-load-per-cpu)",
        )
    return None


def _may_run(policy: QuotaPolicy, spend: WindowSpend, view: QuotaView, who: str) -> str:
    """The sentence of an allowed turn: what is left of the window's allowance. Pure."""
    left = remaining_of(policy, spend)
    extra = "" if left.cpu_s is None else f" and {left.cpu_s:,.1f} CPU-s"
    return (
        f"{who} may run: {seconds_phrase(left.wall_s)} of its "
        f"{seconds_phrase(view.allowance_wall_s)} wall-time allowance{extra} left in the "
        f"{_hours(policy.window_hours)} window"
    )


# --- the I/O shell -----------------------------------------------------------------------------


class DecisionInputs(NamedTuple):
    """What a decision reads besides the goal: its state, its window's spend, the host."""

    state: GoalState
    spend: WindowSpend
    headroom: HostHeadroom


def gather_inputs(
    layout: Layout, goal: Goal, *, now: datetime, headroom: HostHeadroom | None = None
) -> DecisionInputs:
    """Load the goal's state and window spend and measure the host (unless ``headroom`` is given).

    Raises:
        CorruptFileError: the goal's state or a ledger line is damaged.
    """
    state = load_state(layout, goal.id)
    spend = window_spend(layout, goal.id, window_start=goal.quota.window_start(now))
    return DecisionInputs(
        state, spend, headroom if headroom is not None else measure_headroom(now=now)
    )


def holds_until(
    goal: Goal, inputs: DecisionInputs, *, lease_expires_at: datetime | None, now: datetime
) -> datetime | None:
    """The earliest instant after ``now`` at which the same files may decide otherwise. Pure.

    Whatever :func:`should_run` reads that moves with the clock alone: the lease
    running out, the state's ``next_eligible_at`` passing, and the oldest
    bucket of the window leaving it (which changes the window's spend, so the
    numbers and the "left" of the message, and is never later than any
    budget's refill). None when nothing would change but the files (or the host).
    """
    times = [t for t in (lease_expires_at, inputs.state.eligible_at(now)) if t and t > now]
    if inputs.spend.buckets.last_end:
        times.append(leaves_at(inputs.spend.buckets.last_end[0], goal.quota.window))
    return min(times, default=None)


def decide(
    layout: Layout,
    goal: Goal,
    *,
    now: datetime,
    leased: bool = False,
    headroom: HostHeadroom | None = None,
) -> QuotaDecision:
    """Load the goal's state and window spend, measure the host, and call :func:`should_run`.

    Its cost does not grow with the ledger: the window is summed from the
    aggregate cache, which folds only new ledger lines.

    Args:
        layout: the runtime root.
        goal: the goal to decide for.
        now: the decision time.
        leased: whether another turn holds the goal's lease.
        headroom: a snapshot to use instead of measuring the host now.

    Raises:
        CorruptFileError: the goal's state or a ledger line is damaged.
    """
    state, spend, room = gather_inputs(layout, goal, now=now, headroom=headroom)
    return should_run(goal, state, spend, room, leased=leased, now=now)
