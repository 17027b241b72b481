"""Compute quota decisions: may this goal run a turn now, and if not, why and until when."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from loopx.model import Record, UtcDatetime


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
