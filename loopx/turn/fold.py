"""The pure fold of a goal's journals into its projections: state, history, ledger, run logs.

A live turn writes its projections through its phases (``durable_writeback``,
``quota_spend``, ``scheduler_apply``), each built on a pure function of the
journal: :func:`~loopx.turn.writeback.apply_patch`, :func:`~loopx.turn.phases.schedule`,
:func:`~loopx.turn.historyline.history_line`, :func:`~loopx.turn.phases.spend_record`,
:func:`~loopx.turn.runlog.run_report`. Folding those functions over the
journals, oldest turn first, gives in memory the very bytes the phases would
write, without a file or an fsync: ``loopx replay`` compares them with the
disk and ``loopx gc`` seals them into a checkpoint.

What a journal does not hold: changes a human made through the CLI (gates,
a reset host session). Each journal's plan snapshots the goal state it was
planned from, so those fields are taken from the snapshot before the turn is
applied, and the turn-owned fields of the snapshot must equal the fold before
it (a ``chain`` difference otherwise: an earlier journal was lost).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

from loopx.quota.ledger import SpendRecord
from loopx.state import GoalState
from loopx.turn.checkpoint import Checkpoint
from loopx.turn.clockshift import ClockShift, apply_shifts
from loopx.turn.differences import Difference, DifferenceKind
from loopx.turn.historyline import HistoryLine, history_line
from loopx.turn.journal import TurnJournal
from loopx.turn.phases import schedule, spend_record
from loopx.turn.runlog import RunReport, render_markdown, run_report
from loopx.turn.writeback import apply_patch

# Fields of the goal state a human changes through the CLI, never a turn alone.
HUMAN_FIELDS: Final = ("gates", "host_session")
# Not compared along the chain: set by humans and turns alike.
_CHAIN_SKIP: Final = frozenset({*HUMAN_FIELDS, "updated_at"})


def apply_turn_state(state: GoalState | None, journal: TurnJournal) -> GoalState:
    """The goal state after one turn, from the state before it (None: the turn's snapshot). Pure.

    The turn starts from ``state`` with the human-owned fields of its plan's
    snapshot, then its writeback patch and the scheduler's effects, as
    ``durable_writeback`` and ``scheduler_apply`` write them.
    """
    planned = journal.plan.envelope.state
    if state is None:
        base = planned  # the state before a goal's first journal is exactly its snapshot
    else:
        base = state.model_copy(update={n: getattr(planned, n) for n in HUMAN_FIELDS})
    patched = apply_patch(base, journal)
    # scheduler_apply's guard: only the newest applied turn sets the schedule.
    return schedule(patched, journal) if patched.turn_seq <= journal.seq else patched


def fold_state(
    state: GoalState | None, journals: list[TurnJournal], shifts: Sequence[ClockShift] = ()
) -> GoalState:
    """The goal state after ``journals`` (oldest first), from ``state`` (None: the first's plan).

    After each turn, the ``shifts`` ``doctor --repair`` made of the state it left
    are applied (:mod:`loopx.turn.clockshift`), as replay applies them.

    Raises:
        ValueError: neither a state nor a journal to start from.

    """
    for journal in journals:
        state = apply_turn_state(state, journal)
        if shifts:
            state = apply_shifts(state, list(shifts))
    if state is None:
        msg = "fold_state needs a state or at least one journal"
        raise ValueError(msg)
    return state


def chain_differences(replayed: GoalState, journal: TurnJournal) -> list[Difference]:
    """Where the state a journal was planned from disagrees with the fold before it. Pure."""
    planned = journal.plan.envelope.state.model_dump(mode="json")
    rebuilt = replayed.model_dump(mode="json")
    return [
        Difference(
            file=f"turns/{journal.turn_key}.json",
            key=f"plan.envelope.state.{name}",
            kind=DifferenceKind.CHAIN,
            disk=planned.get(name),
            replayed=rebuilt.get(name),
        )
        for name in rebuilt
        if name not in _CHAIN_SKIP and planned.get(name) != rebuilt.get(name)
    ]


@dataclass(slots=True)
class Folded:
    """A goal's projections after a fold, and the chain differences met on the way."""

    state: GoalState
    history: list[HistoryLine] = field(default_factory=list)
    ledger: list[SpendRecord] = field(default_factory=list)
    runs: dict[int, RunReport] = field(default_factory=dict)  # by seq: a later epoch's wins
    chain: list[Difference] = field(default_factory=list)

    def files(self) -> dict[str, bytes]:
        """The bytes the turn's phases write, keyed by path relative to the goal directory.

        State, history, ledger (each only if it has a line), then the run logs in
        file name order.
        """
        out = {"state.json": _document(self.state)}
        if self.history:
            out["history.jsonl"] = b"".join(_line(h) for h in self.history)
        if self.ledger:
            out["quota.jsonl"] = b"".join(_line(r) for r in self.ledger)
        runs: dict[str, bytes] = {}
        for seq, report in self.runs.items():
            runs[f"runs/{seq}.json"] = _document(report)
            runs[f"runs/{seq}.md"] = render_markdown(report).encode()
        out.update(sorted(runs.items()))
        return out


def _document(model: GoalState | RunReport) -> bytes:
    return model.model_dump_json(indent=2).encode() + b"\n"  # as atomic_write_model writes it


def _line(model: HistoryLine | SpendRecord) -> bytes:
    return model.model_dump_json().encode() + b"\n"  # as append_record writes it


def fold(
    checkpoint: Checkpoint | None,
    journals: list[TurnJournal],
    *,
    goal_id: str,
    shifts: Sequence[ClockShift] = (),
) -> Folded:
    """The projections of ``journals`` (oldest first) applied after ``checkpoint``. Pure.

    With ``checkpoint``, the fold starts from its state and ledger lines; the
    history of folded turns is gone with their journals. After the checkpoint
    and after each turn, the ``shifts`` ``doctor --repair`` made of the state
    then are applied (:mod:`loopx.turn.clockshift`).
    """
    state = checkpoint.state if checkpoint is not None else None
    if state is not None and shifts:
        state = apply_shifts(state, list(shifts))
    out = Folded(
        state=GoalState(goal_id=goal_id),
        ledger=list(checkpoint.ledger) if checkpoint is not None else [],
    )
    spent = {r.turn_key for r in out.ledger}
    logged: set[str] = set()
    for journal in journals:
        if state is not None:
            out.chain += chain_differences(state, journal)
        state = apply_turn_state(state, journal)
        if shifts:
            state = apply_shifts(state, list(shifts))
        out.runs[journal.seq] = run_report(journal)
        # Keyed appends: a repeated turn key is skipped, as append_record does.
        if journal.turn_key not in logged:
            logged.add(journal.turn_key)
            out.history.append(history_line(journal))
        record = spend_record(journal)
        if record is not None and record.turn_key not in spent:
            spent.add(record.turn_key)
            out.ledger.append(record)
    if state is not None:
        out.state = state
    return out


__all__ = [
    "HUMAN_FIELDS",
    "Folded",
    "apply_turn_state",
    "chain_differences",
    "fold",
    "fold_state",
]
