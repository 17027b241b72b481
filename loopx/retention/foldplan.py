"""Which of a goal's turns ``loopx gc`` folds into its checkpoint: one pure decision.

A fold takes a prefix of the goal's turns (oldest first), so the checkpoint
plus the journals left replay to the same files as all the journals did. The
prefix ends before the first turn that must keep its full record:

1. a turn that is not terminal (recovery has not finished it);
2. one of the goal's last ``keep_turns`` turns;
3. a turn that ended less than ``keep_days`` ago;
4. the ``limit``-th turn of this pass (gc works a bounded amount at a time).

A folded turn that failed or opened a gate keeps its record ``keep_failed_days``
in the goal's ``kept/`` folder, outside the replay chain; kept records older
than that expire.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from loopx.retention.policy import KeepPolicy


@dataclass(frozen=True, slots=True)
class TurnMeta:
    """What the decision needs of one journal."""

    seq: int
    turn_key: str
    terminal: bool
    ended_at: datetime
    notable: bool  # failed, or opened a gate


@dataclass(frozen=True, slots=True)
class FoldPlan:
    """What one gc pass does to one goal."""

    folded: tuple[TurnMeta, ...]  # oldest first; empty: nothing to fold
    kept: tuple[str, ...]  # turn keys of folded turns whose record moves to kept/
    expired: tuple[str, ...]  # turn keys of kept/ records to delete now

    @property
    def through_seq(self) -> int | None:
        """The newest folded turn's seq, or None."""
        return self.folded[-1].seq if self.folded else None

    @property
    def empty(self) -> bool:
        """Whether the pass has nothing to do."""
        return not self.folded and not self.expired


def plan_fold(
    turns: list[TurnMeta],
    kept: dict[str, datetime],
    policy: KeepPolicy,
    *,
    now: datetime,
    limit: int,
) -> FoldPlan:
    """The fold of ``turns`` (the goal's journals, oldest first) under ``policy``. Pure.

    ``kept``: the turn keys of records in kept/ with the time each turn ended.
    """
    recent = now - timedelta(days=policy.keep_days)
    notable_until = now - timedelta(days=policy.keep_failed_days)
    foldable = max(len(turns) - policy.keep_turns, 0)
    folded: list[TurnMeta] = []
    for turn in turns[: min(foldable, max(limit, 0))]:
        if not turn.terminal or turn.ended_at >= recent:
            break
        folded.append(turn)
    keep = tuple(t.turn_key for t in folded if t.notable and t.ended_at >= notable_until)
    expired = tuple(sorted(k for k, ended in kept.items() if ended < notable_until))
    return FoldPlan(folded=tuple(folded), kept=keep, expired=expired)


__all__ = ["FoldPlan", "TurnMeta", "plan_fold"]
