"""What `loopx notify ...` prints with ``--json``: the targets with their URLs redacted."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from loopx.model import Record, UtcDatetime
from loopx.notify.outbox import Outbox
from loopx.notify.targets import READ_TIMEOUT_S, EventKind, NotifyConfig, NotifyTarget, redact_url


class TargetView(Record):
    """A target as shown: its URL redacted (only the scheme and host remain)."""

    id: str
    url: str  # redacted
    events: list[EventKind]
    added_at: UtcDatetime
    failing: bool = False  # its last delivery failed
    pending: int = 0  # events it has not taken yet
    read_timeout_s: float = READ_TIMEOUT_S  # how long its receiver may take to answer
    unconfirmed: int = 0  # messages given up after tries with no answer (of the last 200)


class DeliveryView(Record):
    """How delivery goes: what waits, what failed last (redacted), when the last one went out."""

    pending: int = 0
    failing_targets: list[str] = Field(default_factory=list)
    last_error: str | None = None
    last_error_at: UtcDatetime | None = None
    last_sent_at: UtcDatetime | None = None
    sent: int = 0  # deliveries remembered (the last 200)


class NotifyList(Record):
    """`loopx notify list --json` (and `add`/`remove`'s, after the change)."""

    schema_version: Literal[1] = 1
    targets: list[TargetView] = Field(default_factory=list)
    link_base: str | None = None
    # Why the links will not open (no address, or it does not answer), when checked.
    link_base_problem: str | None = None
    delivery: DeliveryView = Field(default_factory=DeliveryView)


class TestDelivery(Record):
    """One target's answer to `loopx notify test`."""

    id: str
    url: str  # redacted
    ok: bool
    error: str | None = None


class NotifyTestReport(Record):
    """`loopx notify test --json`."""

    schema_version: Literal[1] = 1
    results: list[TestDelivery] = Field(default_factory=list)


def target_view(target: NotifyTarget, outbox: Outbox) -> TargetView:
    """``target`` as shown. Pure."""
    return TargetView(
        id=target.id,
        url=redact_url(target.url),
        events=list(target.kinds),
        added_at=target.added_at,
        failing=target.id in outbox.failing_targets,
        pending=sum(1 for p in outbox.pending if p.target_id == target.id),
        read_timeout_s=target.read_timeout_s,
        unconfirmed=len(
            {s.message_id for s in outbox.sent if s.target_id == target.id and not s.confirmed}
        ),
    )


def notify_list(config: NotifyConfig, outbox: Outbox, link_base: str | None) -> NotifyList:
    """The whole picture, secrets redacted. Pure."""
    return NotifyList(
        targets=[target_view(t, outbox) for t in config.targets],
        link_base=link_base,
        delivery=DeliveryView(
            pending=len(outbox.pending),
            failing_targets=outbox.failing_targets,
            last_error=outbox.last_error,
            last_error_at=outbox.last_error_at,
            last_sent_at=outbox.last_sent_at,
            sent=len(outbox.sent),
        ),
    )
