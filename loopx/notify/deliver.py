"""Sending the outbox: one Apprise message per target, retried with backoff. The I/O edge.

``run_notify`` is one pass: project, record the new events (durably), then
send what is due, each try journaled before its POST (see ``outbox``). The supervisor runs it in a background thread next to its
status refresh, and ``serve`` runs it when no supervisor does, so a slow or
dead receiver never delays a turn. Apprise is imported here, only to send,
with its own retries off and the target's timeouts.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from datetime import datetime
from typing import Final, NamedTuple

from loopx.errors import CorruptFileError
from loopx.faults import fault_point
from loopx.hostcanary import read_hosts
from loopx.log import get_logger
from loopx.model import utcnow
from loopx.notify.events import (
    NotifyEvent,
    Severity,
    conditions,
    host_conditions,
    message,
    severity,
)
from loopx.notify.links import link_base
from loopx.notify.outbox import (
    Outbox,
    Outcome,
    PendingDelivery,
    give_up_unconfirmed,
    load_outbox,
    outbox_path,
    plan_tries,
    read_timeout_s,
    record_events,
    record_result,
    record_try,
    save_outbox,
)
from loopx.notify.targets import (
    CONNECT_TIMEOUT_S,
    READ_TIMEOUT_S,
    NotifyTarget,
    config_path,
    load_config,
    redact_url,
)
from loopx.root import Layout
from loopx.status.view import StatusProjection, StatusReason
from loopx.storage.locks import locked

log = get_logger(__name__)

FAULT_RECORDED: Final = "notify:recorded"  # the events are recorded, nothing is sent yet
FAULT_SENDING: Final = "notify:sending"  # a try is journaled, its POST not made yet
FAULT_SENT: Final = "notify:sent"  # a target took its message, the outbox does not know yet


def supervisor_alive(layout: Layout) -> bool:
    """Whether the root's supervisor record names a live supervisor on this host (it sends then)."""
    import os  # noqa: PLC0415 - small

    from loopx.fleet import ACTIVE_STATES, FleetRecord, process_runs  # noqa: PLC0415
    from loopx.storage.files import read_model_or_none  # noqa: PLC0415

    try:
        record = read_model_or_none(layout.supervisor_file, FleetRecord)
    except Exception:  # noqa: BLE001 - an unreadable record: serve sends rather than nobody
        return False
    return (
        record is not None
        and record.state in ACTIVE_STATES
        and record.hostname == os.uname().nodename
        and process_runs(record.pid, record.pid_started_at)
    )


class Sent(NamedTuple):
    """How one POST ended, and the error (redacted) when it did not deliver."""

    outcome: Outcome
    error: str | None = None


# The schemes whose POST can carry our headers (Apprise's `+Header=value`) and, for JSON, extra
# payload fields (`:field=value`): the generic webhooks.
HEADER_SCHEMES: Final = frozenset({"json", "jsons", "form", "forms", "xml", "xmls"})
JSON_SCHEMES: Final = frozenset({"json", "jsons"})
IDEMPOTENCY_HEADER: Final = "Idempotency-Key"


def apprise_url(
    url: str, *, read_timeout_s: float, key: str | None = None, event_keys: tuple[str, ...] = ()
) -> str:
    """``url`` with our delivery options as Apprise URL parameters. Pure.

    ``rto``/``cto`` are Apprise's read and connect timeouts and ``retry=0``
    turns its own retries off (the outbox retries, with backoff); a webhook
    gets the message's id as an ``Idempotency-Key`` header, and a JSON one
    also as ``idempotency_key`` and the events' ids (comma-separated) as ``event_ids``
    in the body.
    """
    from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit  # noqa: PLC0415

    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    query.update(
        {"rto": f"{read_timeout_s:g}", "cto": f"{min(CONNECT_TIMEOUT_S, read_timeout_s):g}"}
    )
    query["retry"] = "0"
    scheme = parts.scheme.lower()
    if key is not None and scheme in HEADER_SCHEMES:
        query[f"+{IDEMPOTENCY_HEADER}"] = key
        if scheme in JSON_SCHEMES:
            query[":idempotency_key"] = key
            query[":event_ids"] = ",".join(event_keys)
    return urlunsplit(parts._replace(query=urlencode(query, quote_via=quote)))


def send_message(
    url: str,
    title: str,
    body: str,
    *,
    severity: Severity = Severity.INFO,
    read_timeout_s: float = READ_TIMEOUT_S,
    key: str | None = None,
    event_keys: tuple[str, ...] = (),
) -> Sent:
    """POST one message to one Apprise URL, once (no retry here: the outbox retries).

    Returns:
        The outcome: delivered, surely failed, or unknown (no answer within
        ``read_timeout_s``: the receiver may have taken it), with the error (redacted).
    """
    import warnings  # noqa: PLC0415 - with apprise

    with warnings.catch_warnings():
        # Apprise's plugins (loaded on first use) import the stdlib's `imghdr`,
        # deprecated since Python 3.11: not ours to fix, and no reason to fail a send.
        warnings.simplefilter("ignore", DeprecationWarning)
        full = apprise_url(url, read_timeout_s=read_timeout_s, key=key, event_keys=event_keys)
        return _send(full, url, title, body, severity)


class _Heard(logging.Handler):
    """Apprise's log lines of one send, kept to tell a read timeout from a refusal; never printed."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(Exception):
            self.lines.append(record.getMessage())


def _quiet_apprise() -> logging.Logger:
    """Apprise's own log lines may quote a URL (a secret): they go nowhere; ours are redacted."""
    logger = logging.getLogger("apprise")
    if not logger.handlers:
        logger.addHandler(logging.NullHandler())
    logger.propagate = False
    logger.setLevel(logging.DEBUG)  # its "Socket Exception: Read timed out" line is a debug one
    return logger


# requests' words for a POST that was sent and got no answer: no answer in time, or the
# connection dropped after the request went out. The receiver may have taken it.
_NO_ANSWER: Final = ("read timed out", "read timeout", "connection aborted", "remote end closed")


def _send(full: str, url: str, title: str, body: str, severity: Severity) -> Sent:
    import apprise  # noqa: PLC0415 - only to send (the CLI starts without it)

    logger = _quiet_apprise()
    client = apprise.Apprise()
    if not client.add(full):
        return Sent(Outcome.FAILED, f"Apprise does not know the URL {redact_url(url)}")
    heard = _Heard()
    logger.addHandler(heard)
    try:
        ok = bool(client.notify(title=title, body=body, notify_type=apprise.NotifyType(severity)))
    except Exception as e:  # noqa: BLE001 - a plugin's error must not stop the duty
        return Sent(Outcome.FAILED, f"delivery to {redact_url(url)} failed: {type(e).__name__}")
    finally:
        logger.removeHandler(heard)
    if ok:
        return Sent(Outcome.DELIVERED)
    said = " ".join(heard.lines).lower()
    if any(words in said for words in _NO_ANSWER):
        return Sent(
            Outcome.UNKNOWN,
            f"delivery to {redact_url(url)}: no answer (read timeout {_rto(full)} s) "
            "(the receiver may have it; resent once, later, with a longer timeout)",
        )
    return Sent(Outcome.FAILED, f"delivery to {redact_url(url)} failed")


def _rto(full: str) -> str:
    from urllib.parse import parse_qs, urlsplit  # noqa: PLC0415

    return parse_qs(urlsplit(full).query).get("rto", ["?"])[0]


def open_gates(layout: Layout, projection: StatusProjection) -> dict[str, list[tuple[int, str]]]:
    """The open gates ``(id, question)`` of the projection's gate-pending goals, from their states."""
    from loopx.state import load_state  # noqa: PLC0415 - only for gate-pending goals

    gates: dict[str, list[tuple[int, str]]] = {}
    for goal in projection.goals:
        if goal.reason is StatusReason.GATE_PENDING:
            try:
                state = load_state(layout, goal.goal_id)
            except Exception:  # noqa: BLE001, S112 - the projection's question stands in
                continue
            gates[goal.goal_id] = [(g.id, g.question) for g in state.open_gates]
    return gates


def deliver_due(
    layout: Layout,
    outbox: Outbox,
    targets: list[NotifyTarget],
    base: str | None,
    *,
    now: datetime,
    clock: Callable[[], datetime] | None = None,
) -> Outbox:
    """Send every due message, one per target and batch, each try journaled first; the outbox.

    ``clock`` dates each result (a POST may take its whole timeout); ``now`` by default.
    """
    outbox, dropped = give_up_unconfirmed(outbox, now=now)
    for p in dropped:
        log.warning("notify_unconfirmed", target=p.target_id, tries=p.attempts, **_about(p.event))
    if dropped:
        save_outbox(layout, outbox)
    for target in targets:
        for group in plan_tries(outbox, target.id, now=now):
            outbox = _try(layout, outbox, target, group, base, now=now, clock=clock)
    return outbox


def _try(
    layout: Layout,
    outbox: Outbox,
    target: NotifyTarget,
    group: list[PendingDelivery],
    base: str | None,
    *,
    now: datetime,
    clock: Callable[[], datetime] | None,
) -> Outbox:
    """One message to one target: journal the try, POST, record what came of it."""
    unknown = group[0].unknown
    outbox, mid = record_try(outbox, target.id, group, now=now)
    save_outbox(layout, outbox)  # a sender killed during the POST leaves this
    fault_point(FAULT_SENDING)
    events = [p.event for p in group]
    title, body = message(events, base)
    sent = send_message(
        target.url,
        title,
        body,
        severity=severity(events),
        read_timeout_s=read_timeout_s(target.read_timeout_s, unknown),
        key=mid,
        event_keys=tuple(e.key for e in events),
    )
    fault_point(FAULT_SENT)
    # One line per event, so each carries the goal it is about (jq 'select(.goal_id == G)').
    for event in events:
        about = _about(event)
        if sent.outcome is Outcome.DELIVERED:
            log.info("notify_sent", target=target.id, batch=len(events), message_id=mid, **about)
        else:
            log.warning(
                "notify_failed",
                target=target.id,
                batch=len(events),
                message_id=mid,
                outcome=sent.outcome.value,
                error=sent.error,
                **about,
            )
    keys = {e.key for e in events}
    at = clock() if clock is not None else now
    outbox = record_result(outbox, target.id, keys, error=sent.error, now=at, outcome=sent.outcome)
    save_outbox(layout, outbox)
    return outbox


def _about(event: NotifyEvent) -> dict[str, object]:
    """An event's fields for its log line: its id and kind, and its goal when it has one."""
    about: dict[str, object] = {"event_id": event.id, "kind": event.kind.value}
    if event.goal_id is not None:
        about["goal_id"] = event.goal_id
    return about


def _quarantined_hosts(layout: Layout) -> dict[str, NotifyEvent]:
    """The quarantined host kinds' conditions; none while hosts.json is damaged (logged)."""
    try:
        return host_conditions(read_hosts(layout))
    except CorruptFileError as e:
        log.warning("hosts_file_damaged", error=e.message)
        return {}


def run_notify(
    layout: Layout,
    *,
    now: datetime,
    project: Callable[[], StatusProjection],
    clock: Callable[[], datetime] | None = None,
) -> Outbox | None:
    """One pass: record the new events of ``project()`` and send what is due; None when not set up.

    Skipped (None) while another process runs a pass.
    """
    config = load_config(layout)
    if not config.targets and not outbox_path(layout).exists():
        return None
    from loopx.errors import LockTimeoutError  # noqa: PLC0415 - small
    from loopx.storage.dirs import ensure_dir  # noqa: PLC0415 - small

    ensure_dir(outbox_path(layout).parent)
    try:
        with locked(outbox_path(layout), timeout=0.05):
            projection = project()
            current = conditions(projection, open_gates(layout, projection))
            current.update(_quarantined_hosts(layout))
            kinds = {t.id: {k.value for k in t.kinds} for t in config.targets}
            outbox, new = record_events(load_outbox(layout), current, kinds, now=now)
            save_outbox(layout, outbox)
            for event in new:
                log.info("notify_recorded", **_about(event))
            fault_point(FAULT_RECORDED)
            base = link_base(layout, config)
            return deliver_due(layout, outbox, config.targets, base, now=now, clock=clock)
    except LockTimeoutError:
        return None


class NotifyDuty:
    """Runs :func:`run_notify` in a background thread, one pass at a time (never blocks the caller).

    The caller projects (in its own thread: the status cache is not shared
    across threads) and hands the projection over.
    """

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self._thread: threading.Thread | None = None

    @staticmethod
    def wanted(layout: Layout) -> bool:
        """Whether the root has notifications set up (a stat: cheap on every refresh)."""
        return config_path(layout).exists() or outbox_path(layout).exists()

    def kick(self, projection: StatusProjection, now: datetime) -> bool:
        """Start a pass over ``projection`` unless one still runs; whether one started."""
        if self._thread is not None and self._thread.is_alive():
            return False
        self._thread = threading.Thread(
            target=self._pass, args=(projection, now), name="loopx-notify", daemon=True
        )
        self._thread.start()
        return True

    def _pass(self, projection: StatusProjection, now: datetime) -> None:
        try:
            run_notify(self.layout, now=now, project=lambda: projection, clock=utcnow)
        except Exception as e:  # noqa: BLE001 - notifications must never stop the fleet
            log.warning("notify_pass_failed", error=str(e))

    def join(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` for the running pass (on shutdown)."""
        if self._thread is not None:
            self._thread.join(timeout_s)
