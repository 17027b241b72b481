"""What the projection reads about one goal, gathered from the root by the status cache."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from loopx.quota.window import SpendColumns
from loopx.registry.goalrecords import Goal
from loopx.state import GoalState
from loopx.status.view import ProbeObservation
from loopx.turn.historyline import HistoryLine
from loopx.turn.lease import Lease
from loopx.turn.workdirfiles import WorkdirWait

NO_SPEND: Final = SpendColumns()  # a goal that never ran has no bucket (frozen, so shared)


@dataclass(frozen=True, slots=True)
class GoalInputs:
    """Everything the projection reads about one goal (gathered by the caller).

    ``history`` is the tail of ``history.jsonl``, oldest first; ``spend`` the
    ledger's minute buckets reaching back at least to the quota window's start
    (:func:`loopx.quota.ledger.window_spend`); ``damage`` one line per
    file that could not be read; ``quarantined`` the names of the goal's
    journals in ``quarantine/``.
    """

    goal: Goal
    state: GoalState | None = None
    lease: Lease | None = None
    history: Sequence[HistoryLine] = ()
    spend: SpendColumns = NO_SPEND
    quarantined: Sequence[str] = ()
    damage: Sequence[str] = ()
    probe: ProbeObservation | None = None
    # The goal waits for another goal's turn in its workdir (goals/<id>/turns/.workdir-wait.json).
    workdir_wait: WorkdirWait | None = None
