"""How a turn ended, apart from the journal and the host protocol.

A journal's status and the host's result kind: history and status read them
without importing the journal or the protocol's models.
"""

from __future__ import annotations

from enum import StrEnum


class TurnStatus(StrEnum):
    """A journal's status; everything but ``in_progress`` is terminal."""

    IN_PROGRESS = "in_progress"
    COMMITTED = "committed"
    FAILED = "failed"
    STOPPED = "stopped"

    @property
    def terminal(self) -> bool:
        """Whether the turn is over (the journal is a tombstone)."""
        return self is not TurnStatus.IN_PROGRESS


class ResultKind(StrEnum):
    """What a turn achieved, as the host reports it."""

    PROGRESS = "progress"  # work advanced; schedule another turn
    COMPLETED = "completed"  # the goal is done
    WAIT = "wait"  # nothing to do for wait_seconds
    NEEDS_HUMAN = "needs_human"  # open a gate with `question`
    FAILED = "failed"  # the host could not make progress
