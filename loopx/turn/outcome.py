"""A turn journal's status, apart from the journal: history and status read it without the journal."""

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
