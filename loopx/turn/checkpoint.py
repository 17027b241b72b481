"""``goals/<id>/checkpoint.json``: a goal's past up to turn K, folded, so older journals may go.

A checkpoint holds what replaying the goal's journals up to turn K gives
(the state, the ledger lines still inside a quota window) and counts of the
folded turns, with two digests: ``journals_digest`` chains the digest of the
previous checkpoint with every journal this one replaces, and ``digest``
covers the checkpoint's own content, so a damaged or edited checkpoint is
found by ``loopx replay --verify``. Replay starts from the checkpoint and
applies only the journals after it.
"""

from __future__ import annotations

import hashlib
import json
from typing import Annotated, Final, Literal

from pydantic import Field

from loopx.errors import CorruptFileError
from loopx.model import Record, UtcDatetime
from loopx.quota.ledger import SpendRecord
from loopx.root import Layout
from loopx.state import GoalState
from loopx.storage.files import read_model_or_none

CHECKPOINT_NAME: Final = "checkpoint.json"
KEPT_DIR: Final = "kept"  # records of folded turns kept for longer (failed, gate), outside replay


class FoldedCounts(Record):
    """How many turns a goal's checkpoints folded, by status and result kind."""

    turns: int = 0
    statuses: dict[str, int] = Field(default_factory=dict)
    kinds: dict[str, int] = Field(default_factory=dict)


class Checkpoint(Record):
    """``goals/<id>/checkpoint.json``."""

    schema_version: Literal[1] = 1
    goal_id: str
    through_seq: Annotated[int, Field(ge=1)]
    through_turn_key: str
    state: GoalState  # the goal state right after turn ``through_seq``
    # Ledger lines of folded turns that a quota window may still count, oldest first.
    ledger: list[SpendRecord] = Field(default_factory=list)
    folded: FoldedCounts = Field(default_factory=FoldedCounts)
    journals_digest: str  # sha256: the previous checkpoint's, then each folded journal's
    # When turn ``through_seq`` ended: from the journal, so a fold redone after a crash
    # writes the same bytes.
    through_at: UtcDatetime
    digest: str = ""  # sha256 of everything else; see content_digest


def content_digest(checkpoint: Checkpoint) -> str:
    """The sha256 of the checkpoint's fields other than ``digest``. Pure."""
    body = checkpoint.model_dump(mode="json", exclude={"digest"})
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def chain_digest(previous: str, journals: list[bytes]) -> str:
    """``previous`` extended by the sha256 of each journal file, in turn order. Pure."""
    h = hashlib.sha256(previous.encode())
    for data in journals:
        h.update(hashlib.sha256(data).digest())
    return h.hexdigest()


def sealed(checkpoint: Checkpoint) -> Checkpoint:
    """``checkpoint`` with its ``digest`` set. Pure."""
    return checkpoint.model_copy(update={"digest": content_digest(checkpoint)})


def checkpoint_path(layout: Layout, goal_id: str) -> str:
    """Where a goal's checkpoint lives (a string, for messages)."""
    return str(layout.goal_dir(goal_id) / CHECKPOINT_NAME)


def read_checkpoint(layout: Layout, goal_id: str) -> Checkpoint | None:
    """The goal's checkpoint, or None if it has none.

    Raises:
        CorruptFileError: the file is damaged, not the schema, or its digest does not match.
    """
    path = layout.goal_dir(goal_id) / CHECKPOINT_NAME
    checkpoint = read_model_or_none(path, Checkpoint)
    if checkpoint is not None and checkpoint.digest != content_digest(checkpoint):
        raise CorruptFileError(path, "its digest does not match its content (damaged or edited)")
    return checkpoint


__all__ = [
    "CHECKPOINT_NAME",
    "KEPT_DIR",
    "Checkpoint",
    "FoldedCounts",
    "chain_digest",
    "checkpoint_path",
    "content_digest",
    "read_checkpoint",
    "sealed",
]
