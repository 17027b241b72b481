"""Store a quota decision for the warm ``loopx quota should-run`` (:mod:`loopx.quota.quick`).

The validated path calls :func:`store_snapshot` after it decided with the
real clock. The file is a cache (``projections/quota.d/<id>.snapshot``): written
atomically but not fsynced, and only when it can be trusted:

* no input file changed while the decision read them (their fingerprints
  before and after agree; the aggregate is taken after, since the decision
  itself may fold new ledger lines into it);
* the goal has no host guard (its answer moves with the host's memory and load);
* :func:`loopx.quota.quick.render` reproduces, for the decision's own instant
  and host numbers, exactly the bytes the validated path prints, with
  ``--json`` and without.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any, Final, Literal

from loopx import exitcodes
from loopx._version import VERSION
from loopx.errors import LoopxError
from loopx.model import Record
from loopx.quota.decision import QuotaDecision
from loopx.quota.host import HostNumbers
from loopx.quota.phrases import in_phrase
from loopx.quota.quick import SCHEMA_VERSION, Fingerprint, fingerprints, render, snapshot_file
from loopx.registry.model import Goal
from loopx.root import Layout
from loopx.storage.files import atomic_write_bytes, ensure_dir

# Stop serving this much before the computed instant: a bucket's leaving time
# goes through a float-to-microsecond rounding, and early only costs one decision.
MARGIN: Final = timedelta(milliseconds=1)


class QuotaSnapshot(Record):
    """``projections/quota.d/<id>.snapshot``: a decision and what it holds under."""

    schema_version: Literal[1] = SCHEMA_VERSION
    goal_id: str
    version: str  # the LoopX that decided; another release decides (and words) anew
    registry: str  # the registry file the root was opened with
    files: list[Fingerprint]  # of loopx.quota.quick.input_files, in that order
    decided_at: float  # epoch seconds
    valid_until: float | None  # epoch seconds; None: only a file change ends it
    exit_code: int
    decision: dict[str, Any]  # the `--json` document as JSON values
    message_head: str | None = None  # the message before its "(in N s)", if it ends so


def _message_head(decision: QuotaDecision) -> str | None:
    if decision.next_eligible_at is None:
        return None
    phrase = in_phrase(decision.next_eligible_at, decision.decided_at)
    return decision.message.removesuffix(phrase) if decision.message.endswith(phrase) else None


def build_snapshot(
    layout: Layout,
    goal: Goal,
    decision: QuotaDecision,
    *,
    files: list[Fingerprint],
    until: float | None,
) -> QuotaSnapshot | None:
    """The snapshot of ``decision``, or None when rendering it again would not match."""
    room = decision.headroom
    if room is None:
        return None
    snapshot = QuotaSnapshot(
        goal_id=goal.id,
        version=VERSION,
        registry=str(layout.registry),
        files=files,
        decided_at=decision.decided_at.timestamp(),
        valid_until=until,
        exit_code=exitcodes.OK if decision.allowed else exitcodes.NOT_ALLOWED,
        decision=decision.model_dump(mode="json"),
        message_head=_message_head(decision),
    )
    stored = json.loads(snapshot.model_dump_json())
    host = HostNumbers(room.available_memory_mb, room.load_1m, room.cpu_count)
    at = decision.decided_at
    if (
        render(stored, now=at, host=host, as_json=True)
        != (decision.model_dump_json(indent=2) + "\n").encode()
        or render(stored, now=at, host=None, as_json=False) != (decision.line() + "\n").encode()
    ):
        return None
    return snapshot


def store_snapshot(
    layout: Layout,
    goal: Goal,
    decision: QuotaDecision,
    *,
    before: list[Fingerprint],
    valid_until: datetime | None,
) -> bool:
    """Store ``decision`` for the warm path if it can be trusted (see the module); best effort.

    ``before`` are the input files' fingerprints taken before the decision read
    them. Returns whether a snapshot was written.
    """
    policy = goal.quota
    if policy.min_free_memory_mb is not None or policy.max_load_per_cpu is not None:
        return False
    after = fingerprints(layout, goal.id)
    if after[:-1] != before[:-1]:
        return False  # something changed while the decision read it: next time
    until = None if valid_until is None else (valid_until - MARGIN).timestamp()
    snapshot = build_snapshot(layout, goal, decision, files=after, until=until)
    if snapshot is None:
        return False
    path = snapshot_file(layout, goal.id)
    try:
        ensure_dir(path.parent)
        atomic_write_bytes(path, snapshot.model_dump_json().encode(), durable=False)
    except (LoopxError, OSError):
        return False  # a cache: the next decision writes it again
    return True


__all__ = ["QuotaSnapshot", "build_snapshot", "store_snapshot"]
