"""What ``loopx doctor --repair`` did to a future-dated goal state, kept so replay does it too.

A state dated in the future (a clock that ran ahead, or a system clock
stepped back after writing) is shifted back to now by ``doctor --repair``,
keeping the wait it asked for (:func:`loopx.clock.clamp_state`). No journal
records that, so replay, which rebuilds the state from the journals alone,
disagreed on ``updated_at`` and ``next_eligible_at`` of every repaired goal.
The repair therefore appends one :class:`ClockShift` to
``goals/<id>/clock-shifts.jsonl`` before it rewrites the state, and replay
applies each shift after the turn it followed, to the very state it was made
from (same ``updated_at``), so both derive the same file. A repair that
died between the two writes is finished by the next one with the recorded
instant, so a goal never holds two shifts of the same state.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Literal

from loopx.model import Record, UtcDatetime
from loopx.root import Layout
from loopx.state import GoalState
from loopx.storage.jsonl import append_record, read_records

SHIFTS_FILE = "clock-shifts.jsonl"


class ClockShift(Record):
    """One line of ``goals/<id>/clock-shifts.jsonl``: a future-dated state dated back."""

    schema_version: Literal[1] = 1
    goal_id: str
    shift_key: str  # "<after_seq>@<from_updated_at>": one shift per state it was made from
    after_seq: int  # the state's turn_seq: the shift follows that turn
    from_updated_at: UtcDatetime  # the state's time before the shift (in the future then)
    to_updated_at: UtcDatetime  # the state's time after it (the repair's now)
    recorded_at: UtcDatetime


def shifts_file(layout: Layout, goal_id: str) -> Path:
    """``goals/<id>/clock-shifts.jsonl``."""
    return layout.goal_dir(goal_id) / SHIFTS_FILE


def shift_key(after_seq: int, from_updated_at: datetime) -> str:
    """The key of a shift made from the state of turn ``after_seq`` dated ``from_updated_at``."""
    return f"{after_seq}@{from_updated_at.isoformat()}"


def shifted(state: GoalState, to: datetime) -> GoalState:
    """``state`` dated ``to``, ``next_eligible_at`` moved by as much (the wait it asked kept). Pure."""
    if state.updated_at is None:
        return state
    delta = state.updated_at - to
    update: dict[str, object] = {"updated_at": to}
    if state.next_eligible_at is not None:
        update["next_eligible_at"] = state.next_eligible_at - delta
    return state.model_copy(update=update)


def read_shifts(layout: Layout, goal_id: str) -> list[ClockShift]:
    """The goal's recorded shifts, oldest first ([] without the file).

    Raises:
        CorruptFileError: a complete line is not JSON or not the schema.
    """
    return read_records(shifts_file(layout, goal_id), ClockShift)


def recorded_shift(shifts: list[ClockShift], state: GoalState) -> ClockShift | None:
    """The shift already recorded for ``state`` (a repair that died before its state write). Pure."""
    if state.updated_at is None:
        return None
    key = shift_key(state.turn_seq, state.updated_at)
    return next((s for s in shifts if s.shift_key == key), None)


def record_shift(layout: Layout, before: GoalState, to: datetime, *, now: datetime) -> ClockShift:
    """Append (durably, once per ``before``) the shift of ``before`` to ``to``; return it."""
    at = before.updated_at or to
    shift = ClockShift(
        goal_id=before.goal_id,
        shift_key=shift_key(before.turn_seq, at),
        after_seq=before.turn_seq,
        from_updated_at=at,
        to_updated_at=to,
        recorded_at=now,
    )
    append_record(shifts_file(layout, before.goal_id), shift, key_field="shift_key")
    return shift


def apply_shifts(state: GoalState, shifts: list[ClockShift]) -> GoalState:
    """``state`` after every shift made from it, in order (a shift of another state: none). Pure.

    Replay calls this after each turn with the shifts that follow it; a
    checkpoint's state, folded from the journals, takes the same shifts.
    """
    for shift in shifts:
        if shift.after_seq == state.turn_seq and state.updated_at == shift.from_updated_at:
            state = shifted(state, shift.to_updated_at)
    return state


__all__ = [
    "SHIFTS_FILE",
    "ClockShift",
    "apply_shifts",
    "read_shifts",
    "record_shift",
    "recorded_shift",
    "shift_key",
    "shifted",
    "shifts_file",
]
