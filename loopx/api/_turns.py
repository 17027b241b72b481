"""``root.turns``: `loopx turn run-once`, `journal list|inspect`, `recover`, `replay`."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from loopx.errors import LoopxError, UsageError
from loopx.ids import is_valid_goal_id
from loopx.registry.goals import get_goal
from loopx.root import Layout
from loopx.turn.attempt import TurnAttempt
from loopx.turn.inspection import JournalInspection, JournalList
from loopx.turn.journal import journal_path
from loopx.turn.recovery import RecoveryReport, inspect_file, inspect_goal_journals, recover
from loopx.turn.replay import ReplayReport, repair, replay

if TYPE_CHECKING:
    import threading

    from loopx.agents.hosts.base import Host


@dataclass(frozen=True, slots=True)
class Turns:
    """Turns and their journals on one root."""

    layout: Layout

    def run_one(
        self,
        goal_id: str,
        *,
        agent_id: str = "cli",
        host: Host | None = None,
        stop: threading.Event | None = None,
    ) -> TurnAttempt:
        """`loopx turn run-once`: claim the goal, run exactly one turn in this process, release.

        ``host`` runs the turn with this adapter object instead of the one
        registered for the goal's host kind (handy to test a new host kind).
        ``.report`` is None when no turn ran (leased, quota, or ``stop`` set).

        Raises:
            GoalNotFoundError: no such goal.
            LoopxError: a damaged file or a lock timeout.
        """
        from loopx.agents.turn import attempt_turn  # noqa: PLC0415 - the turn machinery is heavy

        return attempt_turn(self.layout, goal_id, agent_id=agent_id, stop=stop, host=host)

    def journals(self, goal_id: str) -> JournalList:
        """`loopx journal list`: every journal of a goal with its projection, oldest first.

        Raises:
            GoalNotFoundError: no such goal.
        """
        get_goal(self.layout, goal_id)
        return inspect_goal_journals(self.layout, goal_id)

    def inspect(self, goal_id: str, turn_key: str) -> JournalInspection:
        """`loopx journal inspect`: one journal's projection and recovery decision.

        Raises:
            UsageError: ``turn_key`` is not a single safe path segment.
            LoopxError: the goal has no journal ``turn_key``.
        """
        if not is_valid_goal_id(turn_key):  # turn keys follow the goal id rule
            raise UsageError(
                f"invalid turn key {turn_key!r}: not a single safe path segment",
                hint=f"list the goal's turn keys with `loopx journal list {goal_id}`",
            )
        path = journal_path(self.layout, goal_id, turn_key)
        try:
            return inspect_file(path, goal_id=goal_id)
        except FileNotFoundError:
            raise LoopxError(
                f"no journal {turn_key!r} for goal {goal_id!r} ({path})",
                hint=f"list them with `loopx journal list {goal_id}`",
            ) from None

    def recover(self, *, now: datetime | None = None) -> RecoveryReport:
        """`loopx recover`: finish or quarantine every unfinished journal. Idempotent.

        Then every merge a kill interrupted is finished (`loopx goal merge`), or cancelled
        (`loopx goal merge --abort`) when git refuses to finish it.
        """
        report = recover(self.layout, now=now)
        from loopx.agents.automerge import resume_merges  # noqa: PLC0415 - the agents' side is heavy

        merges = resume_merges(self.layout, now=now)
        return report.model_copy(
            update={
                "merges": merges.finished,
                "merges_cancelled": merges.cancelled,
                "merges_waiting": merges.waiting,
                "errors": [*report.errors, *merges.errors],
            }
        )

    def replay(self, goal_id: str, *, verify: bool = False) -> ReplayReport:
        """`loopx replay [--verify]`: rebuild a goal from its journals (and compare with disk)."""
        return replay(self.layout, goal_id, verify=verify)

    def repair(self, goal_id: str, *, now: datetime | None = None) -> ReplayReport:
        """`loopx replay --repair`: rewrite every file that differs from the journals."""
        return repair(self.layout, goal_id, now=now)
