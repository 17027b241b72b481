"""The calls the dashboard's actions make, handed to the server by the API.

The web imports the kernel only, never the API: the API (the composition
root) fills :class:`ActionCalls` with its own methods when it builds a
server with actions, so an answer or a pause from the page runs exactly what
``loopx gate resolve`` or ``loopx goal pause`` runs, with the CLI's checks,
locks and errors. A server without them is read-only.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from loopx.registry.views import GateDocument, GoalDocument
from loopx.worktree.mergejournal import MergeJournal


class AnswerGate(Protocol):
    """``Gates.resolve``: answer gate ``gate`` of a goal (`loopx gate resolve`)."""

    def __call__(
        self, goal_id: str, *, answer: str, gate: int | None = ..., now: datetime | None = ...
    ) -> GateDocument:
        """The gate as answered now."""
        ...


class ChangeStatus(Protocol):
    """``Goals.pause``, ``resume``, ``done`` or ``reopen`` (`loopx goal pause ...`)."""

    def __call__(self, goal_id: str, *, now: datetime | None = ...) -> GoalDocument:
        """The goal as registered now; ``repeated`` when it already was so."""
        ...


class Merge(Protocol):
    """`loopx goal merge ID`, run as a child process; its journal."""

    def __call__(self, goal_id: str) -> MergeJournal:
        """The merge's journal: merged, up to date, or why the base is unchanged."""
        ...


@dataclass(frozen=True, slots=True)
class ActionCalls:
    """One call per dashboard action, each the API's call the CLI's command makes."""

    resolve_gate: AnswerGate
    pause: ChangeStatus
    resume: ChangeStatus
    done: ChangeStatus
    reopen: ChangeStatus
    merge: Merge
