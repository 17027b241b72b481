"""`--until-idle`: can any goal still make progress, and if not, how did the run end? Pure."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from loopx import exitcodes
from loopx.registry.goalrecords import GoalStatus


class Outcome(StrEnum):
    """Where one goal stands for a batch run."""

    PROGRESSING = "progressing"  # eligible now, running, or eligible again soon
    DONE = "done"
    NEEDS_HUMAN = "needs_human"  # an open gate, or paused by a person
    FAILED = "failed"  # its last turn failed and it will not run again soon
    BLOCKED = "blocked"  # quota or a far next_eligible_at keeps it from running


@dataclass(frozen=True, slots=True)
class GoalProgress:
    """What the idle decision needs about one goal (gathered by the supervisor)."""

    goal_id: str
    status: GoalStatus
    open_gates: int = 0
    running: bool = False  # a live lease or an agent heartbeat names it
    eligible_at: datetime | None = None  # earliest time a turn may run (None: now)
    quota_allowed: bool = True
    quota_next_eligible_at: datetime | None = None
    last_failed: bool = False  # the last turn ended failed or reported kind failed


@dataclass(frozen=True, slots=True)
class IdleVerdict:
    """The until-idle answer: whether the fleet is idle, and the exit code if so."""

    idle: bool
    exit_code: int
    outcomes: dict[str, Outcome]

    def count(self, outcome: Outcome) -> int:
        """How many goals have ``outcome``."""
        return sum(1 for o in self.outcomes.values() if o is outcome)


def outcome_of(goal: GoalProgress, *, now: datetime, horizon: timedelta) -> Outcome:
    """One goal's outcome at ``now``; a wait shorter than ``horizon`` still counts as progress."""
    if goal.status in (GoalStatus.DONE, GoalStatus.ARCHIVED):
        return Outcome.DONE
    if goal.running:
        return Outcome.PROGRESSING
    if goal.status is GoalStatus.PAUSED or goal.open_gates:
        return Outcome.NEEDS_HUMAN
    soon = now + horizon
    waits = [t for t in (goal.eligible_at,) if t is not None]
    if not goal.quota_allowed:
        if goal.quota_next_eligible_at is None:
            return Outcome.FAILED if goal.last_failed else Outcome.BLOCKED
        waits.append(goal.quota_next_eligible_at)
    if all(t <= soon for t in waits):
        return Outcome.PROGRESSING
    return Outcome.FAILED if goal.last_failed else Outcome.BLOCKED


def idle_verdict(
    goals: list[GoalProgress], *, now: datetime, horizon: timedelta, fleet_dead: bool = False
) -> IdleVerdict:
    """Whether no goal can make progress, and the run's exit code.

    ``OK`` when every goal is done; ``FAILURE`` when some goal failed (or
    ``fleet_dead``: every agent is in a crash loop, so nothing can progress);
    ``NEEDS_HUMAN`` when none failed but some wait for a human, for quota, or
    for a time beyond ``horizon``.
    """
    outcomes = {g.goal_id: outcome_of(g, now=now, horizon=horizon) for g in goals}
    progressing = any(o is Outcome.PROGRESSING for o in outcomes.values())
    if progressing and not fleet_dead:
        return IdleVerdict(idle=False, exit_code=exitcodes.OK, outcomes=outcomes)
    values = set(outcomes.values())
    if fleet_dead or Outcome.FAILED in values:
        code = exitcodes.FAILURE
    elif values <= {Outcome.DONE}:
        code = exitcodes.OK
    else:
        code = exitcodes.NEEDS_HUMAN
    return IdleVerdict(idle=True, exit_code=code, outcomes=outcomes)
