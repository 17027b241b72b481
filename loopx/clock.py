"""Clock skew between this process and the filesystem the root lives on.

Durations inside one process use the monotonic clock. Across processes only
wall-clock instants are shared (lease expiry, next eligible time, spend
windows), so a process whose clock runs ahead (a wrong timezone setting,
``faketime``, a host on another machine sharing the root) would date a turn
in the future and push the goal's eligibility and quota window that far. A
turn therefore measures its clock against the modification time the kernel
(or the file server) gave a file it just wrote (the lease it claimed), and
from then on :func:`loopx.model.utcnow` dates everything this process
records by that reference when the two disagree by more than
:data:`MAX_SKEW_S`.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Final

from loopx.model import current_offset, set_clock_offset
from loopx.root import Layout
from loopx.root.goallock import goal_lock
from loopx.state import GoalState
from loopx.storage.files import atomic_write_model, read_model_or_none
from loopx.turn.clockshift import read_shifts, record_shift, recorded_shift, shifted

# Up to this much disagreement is accepted as it is (coarse mtimes, slow writes).
MAX_SKEW_S: Final = 2.0
# A measurement of the same filesystem this recent is reused: a clock's skew moves
# rarely, and a probe costs a file's creation and removal, the dearest system
# calls of a turn (an agent would otherwise probe twice a turn).
REMEASURE_AFTER_S: Final = 1.0


class _LastProbe:
    """The filesystem (device) this process measured last, when (monotonic), and what it set."""

    device: int | None = None
    at: float = 0.0
    offset: timedelta | None = None


def skew(
    process_now: datetime, reference: datetime, *, tolerance_s: float = MAX_SKEW_S
) -> timedelta:
    """How far the process clock is ahead of ``reference`` (negative: behind); zero within tolerance. Pure."""
    offset = process_now - reference
    return offset if abs(offset.total_seconds()) > tolerance_s else timedelta(0)


def calibrate(directory: Path) -> timedelta:
    """Measure this process's clock against a file created in ``directory`` now; correct ``utcnow``.

    The probe is a temp file (``.clock.<pid>.<hex>.tmp``) created, read back
    with ``fstat`` and removed at once: no fsync, three system calls. If it
    cannot be created (a full or read-only disk) the previous correction stays,
    as it does when this process probed the same filesystem less than
    :data:`REMEASURE_AFTER_S` ago.

    Returns:
        The offset :func:`loopx.model.utcnow` applies from now on (zero within tolerance).

    """
    try:
        device = os.stat(directory).st_dev
    except OSError:
        return current_offset()
    started = time.monotonic()
    if (
        device == _LastProbe.device
        and started - _LastProbe.at < REMEASURE_AFTER_S
        and current_offset() == _LastProbe.offset
    ):
        return current_offset()
    probe = directory / f".clock.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except OSError:
        return current_offset()
    try:
        now = datetime.now(UTC)
        written = datetime.fromtimestamp(os.fstat(fd).st_mtime, tz=UTC)
    finally:
        os.close(fd)
        with contextlib.suppress(OSError):
            probe.unlink()
    offset = skew(now, written)
    set_clock_offset(offset)
    _LastProbe.device, _LastProbe.at, _LastProbe.offset = device, started, offset
    return offset


def filesystem_skew(path: Path, *, now: datetime) -> timedelta:
    """:func:`skew` of ``now`` (read right after writing ``path``) against ``path``'s mtime."""
    try:
        written = datetime.fromtimestamp(path.stat().st_mtime, tz=UTC)
    except OSError:
        return timedelta(0)
    return skew(now, written)


# A state dated further ahead than this was written by a clock that ran ahead.
FUTURE_TOLERANCE: Final = timedelta(minutes=5)


def clamp_state(state: GoalState, *, now: datetime) -> GoalState | None:
    """The state with its times shifted back so it is dated ``now``, or None if not future-dated. Pure.

    The wait it asked for (``next_eligible_at`` - ``updated_at``) is kept.
    """
    if state.updated_at is None or state.updated_at <= now + FUTURE_TOLERANCE:
        return None
    return shifted(state, now)


def repair_future_dated(layout: Layout, goal_ids: list[str], *, now: datetime) -> list[str]:
    """Clamp every future-dated goal state (under its goal's lock); return the goals changed.

    Each shift is recorded in the goal's ``clock-shifts.jsonl`` before the state
    is rewritten, so ``loopx replay`` derives the same state from the journals
    (:mod:`loopx.turn.clockshift`); a shift recorded by a repair that died before
    its state write is finished with the instant it recorded.
    """
    changed = []
    for goal_id in goal_ids:
        path = layout.state_file(goal_id)
        with goal_lock(layout, goal_id):
            state = read_model_or_none(path, GoalState)
            if state is None or clamp_state(state, now=now) is None:
                continue
            done = recorded_shift(read_shifts(layout, goal_id), state)
            to = done.to_updated_at if done is not None else now
            if done is None:
                record_shift(layout, state, to, now=now)
            atomic_write_model(path, shifted(state, to))
        changed.append(goal_id)
    return changed


__all__ = [
    "FUTURE_TOLERANCE",
    "MAX_SKEW_S",
    "calibrate",
    "clamp_state",
    "filesystem_skew",
    "repair_future_dated",
    "skew",
]
