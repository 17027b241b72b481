"""The gate a merge that did not merge opens, and the goal's status after it.

A conflict or a failing check needs the goal's work to change: the gate names
``loopx gate resolve``, which gives the goal back to its agent (it is made
active), and ``loopx goal merge`` once it is done again. A base that moved
while the merge ran needs nothing of the goal: it stays done, and the gate
names ``loopx goal merge``, which merges it onto the new base and answers the
gate. A merge that ends merged answers every gate earlier merges of the goal
left open. A gate is opened once per merge (keyed by the merge's start), so a
finish redone after a kill finds it instead of opening a second.
"""

from __future__ import annotations

from datetime import datetime

from loopx.registry.goalrecords import Goal, GoalStatus
from loopx.registry.store import update_goal
from loopx.root import Layout
from loopx.state import Gate, GoalState, update_state
from loopx.worktree.mergejournal import CHECK_TAIL_CHARS, MergeJournal, MergeOutcome


def gate_question(journal: MergeJournal) -> str | None:
    """What the gate a failed merge opens asks (None: no gate is due). Pure."""
    into = f"merge of {journal.branch} into {journal.base}"
    goal = journal.goal_id
    after = (
        f"; `loopx gate resolve {goal} --answer TEXT` gives the goal back to its agent, and "
        f"once it is done again `loopx goal merge {goal}` merges it"
    )
    if journal.outcome is MergeOutcome.CONFLICT:
        files = ", ".join(journal.conflicts[:50])
        return (
            f"{into} conflicts in: {files}. The base is unchanged. Merge {journal.base} into "
            f"{journal.branch} and resolve them{after}"
        )
    if journal.outcome is MergeOutcome.CHECK_FAILED and journal.check is not None:
        tail = journal.check.output_tail[-CHECK_TAIL_CHARS:]
        code = "timed out" if journal.check.exit_code is None else f"exit {journal.check.exit_code}"
        return (
            f"{into}: the done-check failed on the merged tree ({code}); the base is "
            f"unchanged. Make it pass{after}. Its output ends:\n{tail}"
        )
    if journal.outcome is MergeOutcome.BASE_MOVED:
        return (
            f"{into}: {journal.base} moved while the merge ran; the base is unchanged and the "
            f"goal is still done. `loopx goal merge {goal}` merges it onto the new "
            f"{journal.base} (and answers this gate)"
        )
    return None


def _merge_opener(journal: MergeJournal) -> str:
    return f"merge:{journal.created_at.isoformat()}"


def open_gate_once(layout: Layout, journal: MergeJournal, question: str, *, now: datetime) -> Gate:
    """Open the merge's gate, or find it opened by this merge before a kill."""
    opener = _merge_opener(journal)
    found: list[Gate] = []

    def change(state: GoalState) -> GoalState:
        mine = [g for g in state.gates if g.opened_by == opener]
        if mine:
            found.append(mine[0])
            return state
        gate = Gate(
            id=max((g.id for g in state.gates), default=0) + 1,
            question=question[:4000],
            opened_at=now,
            opened_by=opener,
        )
        found.append(gate)
        return state.model_copy(update={"gates": [*state.gates, gate], "updated_at": now})

    update_state(layout, journal.goal_id, change)
    return found[0]


def answer_merge_gates(layout: Layout, journal: MergeJournal, *, now: datetime) -> None:
    """A merge that ended merged answers the gates earlier merges of the goal left open."""
    answer = f"merged by `loopx goal merge` ({journal.outcome})"

    def change(state: GoalState) -> GoalState:
        stale = [g for g in state.open_gates if g.opened_by.startswith("merge:")]
        if not stale:
            return state
        gates = [
            g.model_copy(update={"answer": answer, "resolved_at": now}) if g in stale else g
            for g in state.gates
        ]
        return state.model_copy(update={"gates": gates, "updated_at": now})

    update_state(layout, journal.goal_id, change)


def reactivate(layout: Layout, goal_id: str, *, now: datetime) -> None:
    """A done goal whose merge failed goes back to its agent (after the gate's answer)."""

    def change(goal: Goal | None) -> Goal:
        assert goal is not None  # noqa: S101 - the merge read it under the same root
        if goal.status is not GoalStatus.DONE:
            return goal
        return goal.model_copy(update={"status": GoalStatus.ACTIVE, "updated_at": now})

    update_goal(layout, goal_id, change)
