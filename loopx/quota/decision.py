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

from collections.abc import Sequence
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import Field

from loopx.model import Record, UtcDatetime
from loopx.quota.headroom import HostHeadroom, measure_headroom
from loopx.quota.ledger import window_spend
from loopx.quota.window import SpendTotals, WindowSpend, frees_at
from loopx.registry.model import Goal, GoalStatus, QuotaPolicy
from loopx.root import Layout
from loopx.state import GoalState, load_state

__all__ = [
    "HostHeadroom",
    "QuotaDecision",
    "QuotaReason",
    "QuotaRemaining",
    "QuotaReport",
    "WindowSpend",
    "decide",
    "quota_report",
    "should_run",
]


class QuotaReason(StrEnum):
    """Why a goal may or may not run now."""

    OK = "ok"
    PAUSED = "paused"
    WINDOW_EXHAUSTED = "window_exhausted"
    CPU_BUDGET_EXHAUSTED = "cpu_budget_exhausted"
    TOKEN_BUDGET_EXHAUSTED = "token_budget_exhausted"
    COST_BUDGET_EXHAUSTED = "cost_budget_exhausted"
    HOST_MEMORY_LOW = "host_memory_low"
    HOST_OVERLOADED = "host_overloaded"
    GATE_PENDING = "gate_pending"
    LEASED = "leased"
    NOT_YET_ELIGIBLE = "not_yet_eligible"
    DONE = "done"


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


class QuotaRemaining(Record):
    """What is left of each budget in the window; None where the policy sets no cap."""

    wall_s: Annotated[float, Field(ge=0.0)]
    cpu_s: Annotated[float, Field(ge=0.0)] | None = None
    tokens: Annotated[int, Field(ge=0)] | None = None
    cost_usd: Annotated[float, Field(ge=0.0)] | None = None


class QuotaReport(Record):
    """The `loopx quota show --json` document: policy, window, spend, remaining, decision."""

    schema_version: Literal[1] = 1
    goal_id: str
    policy: QuotaPolicy
    window_start: UtcDatetime
    window_end: UtcDatetime
    spend: SpendTotals  # inside the window
    lifetime: SpendTotals  # everything the ledger holds
    remaining: QuotaRemaining
    decision: QuotaDecision


# --- the pure decision -------------------------------------------------------------------------


def _seconds(value: float) -> str:
    return f"{value:,.0f} s" if value >= 10 else f"{value:,.1f} s"  # noqa: PLR2004 - readability


def _hours(value: float) -> str:
    return f"{value:g} h"


def _when(at: datetime, now: datetime) -> str:
    return f"{at.isoformat(timespec='seconds')} (in {_seconds((at - now).total_seconds())})"


def remaining_of(policy: QuotaPolicy, spend: WindowSpend) -> QuotaRemaining:
    """What is left of each budget of ``policy`` after ``spend``."""
    allowance = policy.compute * policy.window_hours * 3600.0
    return QuotaRemaining(
        wall_s=max(0.0, allowance - spend.wall_s),
        cpu_s=None if policy.cpu_seconds is None else max(0.0, policy.cpu_seconds - spend.cpu_s),
        tokens=None if policy.max_tokens is None else max(0, policy.max_tokens - spend.tokens),
        cost_usd=None
        if policy.max_cost_usd is None
        else max(0.0, policy.max_cost_usd - spend.cost_usd),
    )


def _budget_blocks(
    goal: Goal, spend: WindowSpend, now: datetime
) -> list[tuple[QuotaReason, datetime, str]]:
    """Each exhausted window budget, with when it frees up and its sentence, in precedence order."""
    policy = goal.quota
    window = timedelta(hours=policy.window_hours)
    buckets = spend.buckets
    span = f"{_hours(policy.window_hours)} window"
    allowance = policy.compute * policy.window_hours * 3600.0
    checks: list[tuple[QuotaReason, Sequence[float], float | None, str]] = [
        (
            QuotaReason.WINDOW_EXHAUSTED,
            buckets.wall_s,
            allowance,
            (
                f"spent {_seconds(spend.wall_s)} of turn wall time, its allowance is "
                f"{_seconds(allowance)} (compute {policy.compute:g} x {span})"
            ),
        ),
        (
            QuotaReason.CPU_BUDGET_EXHAUSTED,
            buckets.cpu_s,
            policy.cpu_seconds,
            (
                f"spent {spend.cpu_s:,.1f} CPU-s of its cap of {policy.cpu_seconds or 0:,.1f} "
                f"CPU-s per {span}"
            ),
        ),
        (
            QuotaReason.TOKEN_BUDGET_EXHAUSTED,
            buckets.tokens,
            None if policy.max_tokens is None else float(policy.max_tokens),
            f"spent {spend.tokens:,} tokens of its cap of {policy.max_tokens or 0:,} per {span}",
        ),
        (
            QuotaReason.COST_BUDGET_EXHAUSTED,
            buckets.cost_usd,
            policy.max_cost_usd,
            (
                f"spent ${spend.cost_usd:,.2f} of its cap of ${policy.max_cost_usd or 0:,.2f} "
                f"per {span}"
            ),
        ),
    ]
    blocks = []
    for reason, amounts, cap, sentence in checks:
        if cap is None:
            continue
        at = frees_at(buckets.last_end, amounts, cap, window)
        if at is not None:
            blocks.append((reason, max(at, now), sentence))
    return blocks


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
    allowance = policy.compute * policy.window_hours * 3600.0
    numbers = {
        "window_start": spend.window_start,
        "window_hours": policy.window_hours,
        "allowance_wall_s": allowance,
        "spent_wall_s": spend.wall_s,
        "remaining_wall_s": max(0.0, allowance - spend.wall_s),
        "cpu_allowance_s": policy.cpu_seconds,
        "spent_cpu_s": spend.cpu_s,
        "spent_tokens": spend.tokens,
        "spent_cost_usd": spend.cost_usd,
        "spent_turns": spend.turns,
        "token_allowance": policy.max_tokens,
        "cost_allowance_usd": policy.max_cost_usd,
        "headroom": headroom,
        "decided_at": now,
    }

    def refuse(reason: QuotaReason, message: str, at: datetime | None = None) -> QuotaDecision:
        return QuotaDecision.model_validate(
            {"allowed": False, "reason": reason, "message": message, "next_eligible_at": at}
            | numbers
        )

    who = f"goal {goal.id}"
    if goal.status in (GoalStatus.DONE, GoalStatus.ARCHIVED):
        return refuse(QuotaReason.DONE, f"{who} is {goal.status}; it runs no more turns")
    if goal.status is GoalStatus.PAUSED:
        return refuse(
            QuotaReason.PAUSED, f"{who} is paused; resume it with `loopx goal resume {goal.id}`"
        )
    if policy.compute == 0:
        return refuse(
            QuotaReason.PAUSED,
            f"{who} has a compute share of 0, which pauses it; "
            f"raise --quota-compute above 0 to let it run",
        )
    if gates := state.open_gates:
        gate = gates[0]
        question = gate.question if len(gate.question) <= 80 else gate.question[:77] + "..."  # noqa: PLR2004
        more = f" (and {len(gates) - 1} more)" if len(gates) > 1 else ""
        return refuse(
            QuotaReason.GATE_PENDING,
            f"{who} waits for a human to answer gate {gate.id}{more}: {question!r}",
        )
    if leased:
        return refuse(QuotaReason.LEASED, f"{who} is leased: another agent's turn is running it")

    blocks = _budget_blocks(goal, spend, now)
    waits = [at for _, at, _ in blocks]
    not_before = state.next_eligible_at
    if not_before is not None and not_before > now:
        waits.append(not_before)
        at = max(waits)
        return refuse(
            QuotaReason.NOT_YET_ELIGIBLE,
            f"{who} is not eligible before {not_before.isoformat(timespec='seconds')}"
            f"; next eligible at {_when(at, now)}",
            at,
        )
    if blocks:
        reason, _, sentence = blocks[0]
        at = max(waits)
        return refuse(
            reason,
            f"{who} {sentence}; enough of it leaves the window at {_when(at, now)}",
            at,
        )

    if policy.min_free_memory_mb is not None and (
        headroom.available_memory_mb < policy.min_free_memory_mb
    ):
        return refuse(
            QuotaReason.HOST_MEMORY_LOW,
            f"the host has {headroom.available_memory_mb:,.0f} MB of memory available, below "
            f"{who}'s guard of {policy.min_free_memory_mb:,} MB (--min-free-memory-mb)",
        )
    if policy.max_load_per_cpu is not None and headroom.load_per_cpu > policy.max_load_per_cpu:
        return refuse(
            QuotaReason.HOST_OVERLOADED,
            f"the host's 1-minute load {headroom.load_1m:.2f} over {headroom.cpu_count} CPUs is "
            f"{headroom.load_per_cpu:.2f} per CPU, above {who}'s guard of "
            f"{policy.max_load_per_cpu:g} (--max-load-per-cpu)",
        )

    left = remaining_of(policy, spend)
    extra = "" if left.cpu_s is None else f" and {left.cpu_s:,.1f} CPU-s"
    return QuotaDecision.model_validate(
        {
            "allowed": True,
            "reason": QuotaReason.OK,
            "message": f"{who} may run: {_seconds(left.wall_s)} of its "
            f"{_seconds(allowance)} wall-time allowance{extra} left in the "
            f"{_hours(policy.window_hours)} window",
        }
        | numbers
    )


# --- the I/O shell -----------------------------------------------------------------------------


def _gather(
    layout: Layout, goal: Goal, now: datetime, headroom: HostHeadroom | None
) -> tuple[GoalState, WindowSpend, HostHeadroom]:
    state = load_state(layout, goal.id)
    start = now - timedelta(hours=goal.quota.window_hours)
    spend = window_spend(layout, goal.id, window_start=start)
    return state, spend, headroom if headroom is not None else measure_headroom(now=now)


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
    state, spend, room = _gather(layout, goal, now, headroom)
    return should_run(goal, state, spend, room, leased=leased, now=now)


def quota_report(
    layout: Layout,
    goal: Goal,
    *,
    now: datetime,
    leased: bool = False,
    headroom: HostHeadroom | None = None,
) -> QuotaReport:
    """Everything `loopx quota show` prints: policy, window, spend, remaining and the decision.

    Raises:
        CorruptFileError: the goal's state or a ledger line is damaged.
    """
    state, spend, room = _gather(layout, goal, now, headroom)
    decision = should_run(goal, state, spend, room, leased=leased, now=now)
    return QuotaReport(
        goal_id=goal.id,
        policy=goal.quota,
        window_start=spend.window_start,
        window_end=now,
        spend=SpendTotals(
            wall_s=spend.wall_s,
            cpu_s=spend.cpu_s,
            tokens=spend.tokens,
            cost_usd=spend.cost_usd,
            turns=spend.turns,
        ),
        lifetime=spend.lifetime,
        remaining=remaining_of(goal.quota, spend),
        decision=decision,
    )
