"""``notify.d/outbox.json``: what is to be sent, what was, and how delivery goes.

An event is recorded here (pending, per target) before anything is sent, and
leaves ``pending`` only once its target took it, so a supervisor killed in
between sends it after its restart, and ``active`` (the conditions already
seen) keeps a restart from deriving it again. One small document written
atomically under a lock; ``sent`` keeps the last ``SENT_KEPT`` deliveries.

A try is journaled before its POST as if its fate were unknown (the message
id it goes under, one more unknown try, the backoff's next time): a sender
killed mid-POST leaves exactly that, and the next one waits the backoff and
resends the same message under the same id. A try whose fate is unknown (a
read timeout, or a kill) is resent after a backoff with a longer timeout; a
message that had ``MAX_UNKNOWN`` of them is given up as ``unconfirmed``, so no
receiver takes one message more than ``MAX_UNKNOWN`` times. A try that surely
failed (refused, an error status) is retried with backoff until it goes through.

Flapping is digested: a ``DIGESTED`` condition that comes back within
``DIGEST_WINDOW_S`` of its last message is counted, not sent, and the window's
end sends one "again (N times in 30 min)" message.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import Final, Literal

from pydantic import Field

from loopx.model import Record, UtcDatetime
from loopx.notify.events import NotifyEvent, recovered
from loopx.notify.targets import EventKind
from loopx.root import Layout
from loopx.storage.dirs import ensure_dir
from loopx.storage.files import atomic_write_model, read_model_or_none

OUTBOX_DIR: Final = "notify.d"
OUTBOX_NAME: Final = "outbox.json"
SENT_KEPT: Final = 200
RETRY_BASE_S: Final = 5.0
RETRY_MAX_S: Final = 600.0
MAX_UNKNOWN: Final = 2  # tries whose fate is unknown before a message is given up
RETRY_TIMEOUT_FACTOR: Final = 4.0  # a try after an unknown one waits this much longer
DIGEST_WINDOW_S: Final = 1800.0
DIGESTED: Final = frozenset({EventKind.FAILING, EventKind.CRASH_LOOP, EventKind.LIMIT})
IN_FLIGHT: Final = "sent; no answer yet (a sender stopped mid-POST, or still waiting)"


class Outcome(StrEnum):
    """How one POST ended."""

    DELIVERED = "delivered"  # the receiver answered 2xx
    FAILED = "failed"  # surely not taken: refused, unreachable, an error status
    UNKNOWN = "unknown"  # no answer in time: the receiver may have taken it


class PendingDelivery(Record):
    """An event one target has not taken yet."""

    event: NotifyEvent
    target_id: str
    attempts: int = 0
    next_try_at: UtcDatetime
    last_error: str | None = None  # redacted
    # The message it went out in (its idempotency key), from its first try on: a retry
    # resends that message, never a new batch under a new key.
    message_id: str | None = None
    unknown: int = 0  # tries whose fate is unknown (read timeouts, a sender killed mid-POST)


class SentDelivery(Record):
    """An event a target took (or, ``confirmed`` false, was given up after unknown tries)."""

    event_id: str
    target_id: str
    sent_at: UtcDatetime
    attempts: int
    message_id: str | None = None
    event_key: str | None = None
    confirmed: bool = True


class Digest(Record):
    """A flapping condition's window: the first occurrence was sent, the next are counted."""

    condition: str
    window_start: UtcDatetime
    held: int = 0  # occurrences since the window began, not sent yet
    last: NotifyEvent  # the newest occurrence (its text goes into the digest message)


class Outbox(Record):
    """``notify.d/outbox.json``."""

    schema_version: Literal[1] = 1
    baselined: bool = (
        False  # the conditions already true when notifications were set up are not news
    )
    active: list[str] = Field(default_factory=list)  # ids of the conditions of the last projection
    pending: list[PendingDelivery] = Field(default_factory=list)
    digests: list[Digest] = Field(default_factory=list)
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


def read_timeout_s(base_s: float, unknown: int) -> float:
    """A try's read timeout: the target's, longer once a try's fate was unknown. Pure."""
    return base_s * RETRY_TIMEOUT_FACTOR if unknown else base_s


def message_id(target_id: str, events: Iterable[NotifyEvent]) -> str:
    """A message's idempotency key: the same events to the same target, the same key. Pure."""
    text = "\n".join([target_id, *sorted(e.key for e in events)])
    return "loopx-" + hashlib.sha256(text.encode()).hexdigest()[:24]


def pend(
    events: Iterable[NotifyEvent], targets: Mapping[str, set[str]], now: datetime
) -> list[PendingDelivery]:
    """``events`` pending, due ``now``, for each target (id -> its kinds) that wants them. Pure."""
    return [
        PendingDelivery(event=event, target_id=tid, next_try_at=now)
        for event in events
        for tid, kinds in targets.items()
        if event.kind.value in kinds
    ]


def record_events(
    outbox: Outbox,
    current: dict[str, NotifyEvent],
    targets: dict[str, set[str]],
    *,
    now: datetime,
) -> tuple[Outbox, list[NotifyEvent]]:
    """The outbox with the new conditions of ``current`` pending for every target that wants them. Pure.

    ``targets`` maps a target id to the event kinds it gets. Before the first
    baseline nothing is news: the conditions are only remembered. A fleet
    incident that ended (the supervisor back, an agent out of its crash loop,
    the disk fine again) is a "recovered" event. A flapping condition is
    counted in its digest instead (see the module's docstring), and a digest
    whose window ended sends its count. Returns the outbox and the events
    made pending.
    """
    if not outbox.baselined:
        return outbox.model_copy(update={"baselined": True, "active": sorted(current)}), []
    seen = set(outbox.active)
    new = [e for ident, e in sorted(current.items()) if ident not in seen]
    new += [e for ident in outbox.active if ident not in current and (e := recovered(ident, now))]
    digests, send = _digest(outbox.digests, new, now)
    pending = [*outbox.pending, *pend(send, targets, now)]
    known = set(targets)
    pending = [p for p in pending if p.target_id in known]  # a removed target's are dropped
    update = {"active": sorted(current), "pending": pending, "digests": digests}
    return outbox.model_copy(update=update), send


def _digest(
    digests: list[Digest], new: list[NotifyEvent], now: datetime
) -> tuple[list[Digest], list[NotifyEvent]]:
    """The digests after ``new`` and ``now``, and the events to send. Pure."""
    window = timedelta(seconds=DIGEST_WINDOW_S)
    by_condition = {d.condition: d for d in digests}
    send: list[NotifyEvent] = []
    for event in new:
        if event.kind not in DIGESTED:
            send.append(event)
            continue
        d = by_condition.get(event.id)
        if d is not None and now - d.window_start < window:
            by_condition[event.id] = d.model_copy(update={"held": d.held + 1, "last": event})
        else:
            by_condition[event.id] = Digest(condition=event.id, window_start=now, last=event)
            send.append(event)
    kept: list[Digest] = []
    for d in by_condition.values():
        if now - d.window_start < window:
            kept.append(d)
        elif d.held:
            send.append(_again(d, now))
            kept.append(Digest(condition=d.condition, window_start=now, last=d.last))
    return sorted(kept, key=lambda d: d.condition), send


def _again(d: Digest, now: datetime) -> NotifyEvent:
    """The one message for a window's flapping: "failing again (5 times in 30 min)". Pure."""
    minutes = round(DIGEST_WINDOW_S / 60)
    what = d.last.title.split(": ", 1)[-1]
    who = d.last.goal_id or d.last.title.split(": ", 1)[0]
    title = f"{who}: {what} again ({d.held + 1} times in {minutes} min)"
    return d.last.model_copy(update={"title": title, "since": now})


def plan_tries(outbox: Outbox, target_id: str, *, now: datetime) -> list[list[PendingDelivery]]:
    """The messages due for ``target_id`` now, each as its pending deliveries. Pure.

    A message already tried goes again as it was (its id, its events); the
    due events never tried make one new message.
    """
    mine = [p for p in outbox.pending if p.target_id == target_id]
    tried: dict[str, list[PendingDelivery]] = {}
    for p in mine:
        if p.message_id is not None:
            tried.setdefault(p.message_id, []).append(p)
    plans = [group for _, group in sorted(tried.items()) if group[0].next_try_at <= now]
    fresh = [p for p in mine if p.message_id is None and p.next_try_at <= now]
    if fresh:
        plans.append(fresh)
    return plans


def record_try(
    outbox: Outbox, target_id: str, group: list[PendingDelivery], *, now: datetime
) -> tuple[Outbox, str]:
    """The outbox as if this try's fate were unknown (written before the POST), and its message id. Pure."""
    mid = group[0].message_id or message_id(target_id, [p.event for p in group])
    keys = {p.event.key for p in group}
    pending: list[PendingDelivery] = []
    for p in outbox.pending:
        if p.target_id == target_id and p.event.key in keys:
            attempts = p.attempts + 1
            p = p.model_copy(  # noqa: PLW2901 - the try's journal entry replaces it
                update={
                    "message_id": mid,
                    "attempts": attempts,
                    "unknown": p.unknown + 1,
                    "last_error": IN_FLIGHT,
                    "next_try_at": now + timedelta(seconds=retry_delay_s(attempts)),
                }
            )
        pending.append(p)
    return outbox.model_copy(update={"pending": pending}), mid


def give_up_unconfirmed(outbox: Outbox, *, now: datetime) -> tuple[Outbox, list[PendingDelivery]]:
    """The outbox without the messages that had ``MAX_UNKNOWN`` unknown tries, and those. Pure.

    Each may have reached its receiver every time; another try could only
    add a copy. They are kept in ``sent`` as unconfirmed.
    """
    done = [p for p in outbox.pending if p.unknown >= MAX_UNKNOWN]
    if not done:
        return outbox, []
    sent = [
        *outbox.sent,
        *(
            SentDelivery(
                event_id=p.event.id,
                event_key=p.event.key,
                target_id=p.target_id,
                sent_at=now,
                attempts=p.attempts,
                message_id=p.message_id,
                confirmed=False,
            )
            for p in done
        ),
    ]
    pending = [p for p in outbox.pending if p.unknown < MAX_UNKNOWN]
    return outbox.model_copy(update={"pending": pending, "sent": sent[-SENT_KEPT:]}), done


def record_result(
    outbox: Outbox,
    target_id: str,
    event_keys: set[str],
    *,
    error: str | None,
    now: datetime,
    outcome: Outcome | None = None,
) -> Outbox:
    """The outbox after the try :func:`record_try` journaled (``error`` when it failed). Pure.

    ``outcome`` defaults to delivered without an error and surely failed with
    one. A surely failed try no longer counts as unknown; an unknown one stays
    counted, and is given up at ``MAX_UNKNOWN`` by :func:`give_up_unconfirmed`.
    """
    if outcome is None:
        outcome = Outcome.DELIVERED if error is None else Outcome.FAILED
    pending: list[PendingDelivery] = []
    sent = list(outbox.sent)
    for p in outbox.pending:
        if p.target_id != target_id or p.event.key not in event_keys:
            pending.append(p)
        elif outcome is Outcome.DELIVERED:
            sent.append(
                SentDelivery(
                    event_id=p.event.id,
                    event_key=p.event.key,
                    target_id=target_id,
                    sent_at=now,
                    attempts=p.attempts,
                    message_id=p.message_id,
                )
            )
        else:
            unknown = p.unknown - 1 if outcome is Outcome.FAILED else p.unknown
            pending.append(
                p.model_copy(
                    update={
                        "unknown": max(0, unknown),
                        "last_error": error,
                        "next_try_at": now + timedelta(seconds=retry_delay_s(p.attempts)),
                    }
                )
            )
    failing = set(outbox.failing_targets)
    update: dict[str, object] = {"pending": pending, "sent": sent[-SENT_KEPT:]}
    if outcome is Outcome.DELIVERED:
        failing.discard(target_id)
        update["last_sent_at"] = now
    else:
        failing.add(target_id)
        update["last_error"] = error
        update["last_error_at"] = now
    update["failing_targets"] = sorted(failing)
    return outbox.model_copy(update=update)
