"""The fencing epoch: a goal's counter, raised by every claim, and the write fence it makes.

``goals/<id>/epoch`` counts the goal's claims. A holder writes only inside
:meth:`Fence.held`, which takes the goal's lock and refuses the write once the
counter moved past the holder's epoch (a takeover raised it).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from loopx.errors import CorruptFileError, LeaseLostError
from loopx.root import Layout
from loopx.root.goallock import goal_lock
from loopx.storage.files import atomic_write_bytes, read_bytes


def read_epoch(layout: Layout, goal_id: str) -> int:
    """The goal's fencing counter (0 before the first claim).

    Raises:
        CorruptFileError: the counter file is not an integer.

    """
    path = layout.epoch_file(goal_id)
    try:
        text = read_bytes(path).decode().strip()
    except FileNotFoundError:
        return 0
    try:
        return int(text)
    except ValueError as e:
        raise CorruptFileError(path, f"the epoch counter is not an integer: {text[:40]!r}") from e


def recorded_epoch(layout: Layout, goal_id: str) -> int:
    """The highest epoch the goal's files name: its counter, or its newest journal's.

    The counter's rename is made durable by the turn's next fsync of the goal's
    directory (its writeback), not by the claim: until then the only durable
    record of the epoch is the journal the holder creates (fsynced, with its
    directory, before its host runs), whose name ends in ``-e<epoch>``. So a
    power cut that loses the counter's rename cannot make a claim hand out an
    epoch any durable file names. Every holder on this machine dies with it;
    on a network filesystem the server commits a rename before it answers.

    Raises:
        CorruptFileError: the counter file is damaged.
    """
    return max(read_epoch(layout, goal_id), highest_journal_epoch(layout.turns_dir(goal_id)))


def highest_journal_epoch(directory: Path) -> int:
    """The highest epoch a turn journal's name in ``directory`` ends with (0: none).

    Journal names are ``<turn_key>.json`` with keys ``<goal>-t<seq>-e<epoch>``.
    """
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return 0
    high = 0
    for name in names:
        epoch = name.removesuffix(".json").rpartition("-e")[2]
        if name.endswith(".json") and epoch.isdigit():
            high = max(high, int(epoch))
    return high


def raise_epoch(layout: Layout, goal_id: str, epoch: int) -> None:
    """Write the goal's fencing counter (under the goal's lock): content fsynced, rename not.

    See :func:`recorded_epoch` for why the directory's fsync can wait.
    """
    atomic_write_bytes(layout.epoch_file(goal_id), f"{epoch}\n".encode(), sync_dir=False)


@dataclass(frozen=True, slots=True)
class Fence:
    """A holder's right to write for a goal: valid while the counter equals ``epoch``."""

    layout: Layout
    goal_id: str
    epoch: int

    def check(self) -> None:
        """Raise unless the goal's counter still equals this fence's epoch.

        Raises:
            LeaseLostError: a takeover raised the counter.

        """
        current = read_epoch(self.layout, self.goal_id)
        if current != self.epoch:
            raise LeaseLostError(self.goal_id, self.epoch, current)

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """Hold the goal lock with the epoch checked: write only inside this block.

        Raises:
            LeaseLostError: a takeover raised the counter.

        """
        with goal_lock(self.layout, self.goal_id):
            self.check()
            yield
