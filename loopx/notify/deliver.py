"""Sending the outbox: one Apprise message per target, retried with backoff. The I/O edge.

``run_notify`` is one pass: project, record the new events (durably), then
send what is due. The supervisor runs it in a background thread next to its
status refresh, and ``serve`` runs it when no supervisor does, so a slow or
dead receiver never delays a turn. Apprise is imported here, only to send.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Final

from loopx.faults import fault_point
from loopx.log import get_logger
from loopx.notify.config import (
    NotifyConfig,
    NotifyTarget,
    config_path,
    load_config,
    redact_url,
)
from loopx.notify.events import NotifyEvent, conditions, message
from loopx.notify.outbox import (
    OUTBOX_DIR,
    Outbox,
    load_outbox,
    outbox_path,
    record_events,
    record_result,
    save_outbox,
)
from loopx.root import Layout
from loopx.status.view import StatusProjection, StatusReason
from loopx.storage.locks import locked

log = get_logger(__name__)

SERVE_URL_NAME: Final = "serve.url"  # serve's address, for the links (no token in it)
TRIES: Final = 3  # tries of one send before the outbox's backoff takes over
FAULT_RECORDED: Final = "notify:recorded"  # the events are recorded, nothing is sent yet
FAULT_SENT: Final = "notify:sent"  # a target took its message, the outbox does not know yet


def serve_url_path(layout: Layout) -> Path:
    """``<root>/notify.d/serve.url``: the address `loopx serve` last served at."""
    return layout.root / OUTBOX_DIR / SERVE_URL_NAME


def record_serve_url(layout: Layout, url: str) -> None:
    """Remember the dashboard's address (without the token) for the notifications' links."""
    from loopx.storage.files import atomic_write_bytes, ensure_dir  # noqa: PLC0415 - small

    path = serve_url_path(layout)
    ensure_dir(path.parent)
    atomic_write_bytes(path, url.encode() + b"\n", durable=False)


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


def link_base(layout: Layout, config: NotifyConfig) -> str | None:
    """Where the links point: ``--link-base``, else serve's recorded address, else none."""
    if config.link_base:
        return config.link_base
    try:
        return serve_url_path(layout).read_text().strip() or None
    except FileNotFoundError:
        return None


def send_message(url: str, title: str, body: str) -> str | None:
    """Send one message to one Apprise URL, trying ``TRIES`` times; the error (redacted) or None."""
    import warnings  # noqa: PLC0415 - with apprise

    with warnings.catch_warnings():
        # Apprise's plugins (loaded on first use) import the stdlib's `imghdr`,
        # deprecated since Python 3.11: not ours to fix, and no reason to fail a send.
        warnings.simplefilter("ignore", DeprecationWarning)
        return _send(url, title, body)


def _quiet_apprise() -> None:
    """Apprise's own log lines may quote a URL (a secret): they go nowhere; ours are redacted."""
    import logging  # noqa: PLC0415 - with apprise

    logger = logging.getLogger("apprise")
    if not logger.handlers:
        logger.addHandler(logging.NullHandler())
    logger.propagate = False


def _send(url: str, title: str, body: str) -> str | None:
    import apprise  # noqa: PLC0415 - only to send (the CLI starts without it)
    from tenacity import (  # noqa: PLC0415 - with apprise
        RetryError,
        retry,
        retry_if_result,
        stop_after_attempt,
        wait_exponential,
    )

    _quiet_apprise()
    client = apprise.Apprise()
    if not client.add(url):
        return f"Apprise does not know the URL {redact_url(url)}"

    @retry(
        retry=retry_if_result(lambda ok: not ok),
        stop=stop_after_attempt(TRIES),
        wait=wait_exponential(multiplier=0.2, max=2),
    )
    def attempt() -> bool:
        return bool(client.notify(title=title, body=body))

    try:
        attempt()
    except RetryError:
        return f"delivery to {redact_url(url)} failed {TRIES} times"
    except Exception as e:  # noqa: BLE001 - a plugin's error must not stop the duty
        return f"delivery to {redact_url(url)} failed: {type(e).__name__}"
    return None


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
    only_due: bool = True,
) -> Outbox:
    """Send every due pending event, batched into one message per target; the updated outbox."""
    for target in targets:
        due = [
            p
            for p in outbox.pending
            if p.target_id == target.id and (not only_due or p.next_try_at <= now)
        ]
        if not due:
            continue
        events: list[NotifyEvent] = [p.event for p in due]
        title, body = message(events, base)
        error = send_message(target.url, title, body)
        fault_point(FAULT_SENT)
        ids = {e.id for e in events}
        # One line per event, so each carries the goal it is about (jq 'select(.goal_id == G)').
        for event in events:
            about = _about(event)
            if error is None:
                log.info("notify_sent", target=target.id, batch=len(events), **about)
            else:
                log.warning(
                    "notify_failed", target=target.id, batch=len(events), error=error, **about
                )
        outbox = record_result(outbox, target.id, ids, error=error, now=now)
        save_outbox(layout, outbox)
    return outbox


def _about(event: NotifyEvent) -> dict[str, object]:
    """An event's fields for its log line: its id and kind, and its goal when it has one."""
    about: dict[str, object] = {"event_id": event.id, "kind": event.kind.value}
    if event.goal_id is not None:
        about["goal_id"] = event.goal_id
    return about


def run_notify(
    layout: Layout,
    *,
    now: datetime,
    project: Callable[[], StatusProjection],
) -> Outbox | None:
    """One pass: record the new events of ``project()`` and send what is due; None when not set up.

    Skipped (None) while another process runs a pass.
    """
    config = load_config(layout)
    if not config.targets and not outbox_path(layout).exists():
        return None
    from loopx.errors import LockTimeoutError  # noqa: PLC0415 - small
    from loopx.storage.files import ensure_dir  # noqa: PLC0415 - small

    ensure_dir(outbox_path(layout).parent)
    try:
        with locked(outbox_path(layout), timeout=0.05):
            projection = project()
            current = conditions(projection, open_gates(layout, projection))
            kinds = {t.id: {k.value for k in t.events} for t in config.targets}
            outbox, new = record_events(load_outbox(layout), current, kinds, now=now)
            save_outbox(layout, outbox)
            for event in new:
                log.info("notify_recorded", **_about(event))
            fault_point(FAULT_RECORDED)
            return deliver_due(layout, outbox, config.targets, link_base(layout, config), now=now)
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
            run_notify(self.layout, now=now, project=lambda: projection)
        except Exception as e:  # noqa: BLE001 - notifications must never stop the fleet
            log.warning("notify_pass_failed", error=str(e))

    def join(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` for the running pass (on shutdown)."""
        if self._thread is not None:
            self._thread.join(timeout_s)
