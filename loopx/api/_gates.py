"""``root.gates``: `loopx gate open|resolve`."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from loopx.model import utcnow
from loopx.registry.goals import open_gate, resolve_gate
from loopx.registry.views import GateDocument
from loopx.root import Layout


@dataclass(frozen=True, slots=True)
class Gates:
    """Human gates of one root's goals."""

    layout: Layout

    def open(self, goal_id: str, *, question: str, now: datetime | None = None) -> GateDocument:
        """`loopx gate open`: ask a human a question; the goal waits for the answer.

        Raises:
            GoalNotFoundError: no such goal.
            InvalidPolicyError: the question is empty or too long.
        """
        gate = open_gate(self.layout, goal_id, question, now=now or utcnow())
        return GateDocument(goal_id=goal_id, gate=gate)

    def resolve(
        self, goal_id: str, *, answer: str, gate: int | None = None, now: datetime | None = None
    ) -> GateDocument:
        """`loopx gate resolve`: answer the oldest open gate (or gate number ``gate``).

        Raises:
            GoalNotFoundError: no such goal.
            GoalStateError: no gate is open (or ``gate`` is not an open gate).
        """
        answered = resolve_gate(self.layout, goal_id, answer, now=now or utcnow(), gate_id=gate)
        return GateDocument(goal_id=goal_id, gate=answered)
