"""``notify.d/outbox.json``: what is to be sent, what was, and how delivery goes.

An event is recorded here (pending, per target) before anything is sent, and
leaves ``pending`` only once its target took it, so a supervisor killed in
between sends it after its restart, and ``active`` (the conditions already
seen) keeps a restart from deriving it again. One small document written
atomically under a lock; ``sent`` keeps the last ``SENT_KEPT`` deliveries.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Final, Literal

from pydantic import Field

from loopx.model import Record, UtcDatetime
from loopx.notify.events import NotifyEvent
from loopx.root import Layout
from loopx.storage.files import atomic_write_model, ensure_dir, read_model_or_none

OUTBOX_DIR: Final = "notify.d"
OUTBOX_NAME: Final = "outbox.json"
SENT_KEPT: Final = 200
RETRY_BASE_S: Final = 5.0
RETRY_MAX_S: Final = 600.0


class PendingDelivery(Record):
    """An event one target has not taken yet."""

    event: NotifyEvent
    target_id: str
    attempts: int = 0
    next_try_at: UtcDatetime
    last_error: str | None = None  # redacted


class SentDelivery(Record):
    """An event a target took."""

    event_id: str
    target_id: str
    sent_at: UtcDatetime
    attempts: int


class Outbox(Record):
    """``notify.d/outbox.json``."""

    schema_version: Literal[1] = 1
    baselined: bool = (
        False  # the conditions already true when notifications were set up are not news
    )
    active: list[str] = Field(default_factory=list)  # ids of the conditions of the last projection
    pending: list[PendingDelivery] = Field(default_factory=list)
    sent: list[SentDelivery] = Field(default_factory=list)
    failing_targets: list[str] = Field(default_factory=list)  # whose last try failed
    last_error: str | None = None  # redacted
    last_error_at: UtcDatetime | None = None
    last_sent_at: UtcDatetime | None = None


def outbox_path(layout: Layout) -> Path:
    """``<root>/notify.d/outbox.json``."""
    return layout.root / OUTBOX_DIR / OUTBOX_NAME


def load_outbox(layout: Layout) -> Outbox:
    """The outbox (empty when there is none).

    Raises:
        CorruptFileError: the file is not the schema.
    """
    return read_model_or_none(outbox_path(layout), Outbox) or Outbox()


def save_outbox(layout: Layout, outbox: Outbox) -> None:
    """Write the outbox atomically and durably."""
    path = outbox_path(layout)
    ensure_dir(path.parent)
    atomic_write_model(path, outbox)


def retry_delay_s(attempts: int) -> float:
    """How long a target waits after its ``attempts``-th failed try: doubling from 5 s to 10 min. Pure."""
    return min(RETRY_MAX_S, RETRY_BASE_S * 2.0 ** max(0, attempts - 1))


def record_events(
    outbox: Outbox,
    current: dict[str, NotifyEvent],
    targets: dict[str, set[str]],
    *,
    now: datetime,
) -> tuple[Outbox, list[NotifyEvent]]:
    """The outbox with the new conditions of ``current`` pending for every target that wants them. Pure.

    ``targets`` maps a target id to the event kinds it gets. Before the first
    baseline nothing is news: the conditions are only remembered.
    """
    if not outbox.baselined:
        return outbox.model_copy(update={"baselined": True, "active": sorted(current)}), []
    seen = set(outbox.active)
    new = [e for ident, e in sorted(current.items()) if ident not in seen]
    pending = list(outbox.pending)
    for event in new:
        pending.extend(
            PendingDelivery(event=event, target_id=tid, next_try_at=now)
            for tid, kinds in targets.items()
            if event.kind.value in kinds
        )
    known = set(targets)
    pending = [p for p in pending if p.target_id in known]  # a removed target's are dropped
    return outbox.model_copy(update={"active": sorted(current), "pending": pending}), new


def record_result(
    outbox: Outbox,
    target_id: str,
    event_ids: set[str],
    *,
    error: str | None,
    now: datetime,
) -> Outbox:
    """The outbox after one try to send ``event_ids`` to ``target_id`` (``error`` when it failed). Pure."""
    pending: list[PendingDelivery] = []
    sent = list(outbox.sent)
    for p in outbox.pending:
        if p.target_id != target_id or p.event.id not in event_ids:
            pending.append(p)
        elif error is None:
            sent.append(
                SentDelivery(
                    event_id=p.event.id, target_id=target_id, sent_at=now, attempts=p.attempts + 1
                )
            )
        else:
            attempts = p.attempts + 1
            pending.append(
                p.model_copy(
                    update={
                        "attempts": attempts,
                        "last_error": error,
                        "next_try_at": now + timedelta(seconds=retry_delay_s(attempts)),
                    }
                )
            )
    failing = set(outbox.failing_targets)
    update: dict[str, object] = {"pending": pending, "sent": sent[-SENT_KEPT:]}
    if error is None:
        failing.discard(target_id)
        update["last_sent_at"] = now
    else:
        failing.add(target_id)
        update["last_error"] = error
        update["last_error_at"] = now
    update["failing_targets"] = sorted(failing)
    return outbox.model_copy(update=update)
