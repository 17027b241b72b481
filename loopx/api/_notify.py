"""``root.notify``: `loopx notify add|list|remove|test`."""

from __future__ import annotations

from datetime import datetime

from loopx.model import utcnow
from loopx.notify.outbox import load_outbox, outbox_path, save_outbox
from loopx.notify.targets import (
    NotifyTarget,
    add_target,
    load_config,
    parse_events,
    redact_url,
    remove_target,
    set_link_base,
)
from loopx.notify.targetviews import NotifyList, NotifyTestReport, TestDelivery, notify_list
from loopx.root import Layout
from loopx.storage.dirs import ensure_dir
from loopx.storage.locks import locked

NO_LINK_BASE = (
    "no dashboard address for the links: `loopx notify set --link-base URL`, or run `loopx serve`"
)


class Notify:
    """Notification targets of one root (Apprise URLs, stored 0600, shown redacted)."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout

    def list(self, *, check_links: bool = False) -> NotifyList:
        """`loopx notify list`: the targets (URLs redacted) and how delivery goes.

        With ``check_links``, whether the links' base answers (a GET, up to 3 s).
        """
        from loopx.notify.links import link_base, probe  # noqa: PLC0415 - small

        config = load_config(self.layout)
        base = link_base(self.layout, config)
        listing = notify_list(config, load_outbox(self.layout), base)
        if check_links and config.targets:
            problem = probe(base) if base else NO_LINK_BASE
            listing = listing.model_copy(update={"link_base_problem": problem})
        return listing

    def set(self, *, link_base: str | None) -> NotifyList:
        """`loopx notify set --link-base URL` (None clears it): where the links point.

        Raises:
            InvalidNotifyUrlError: not an http:// or https:// URL.
        """
        set_link_base(self.layout, link_base)
        return self.list(check_links=True)

    def status_line(self) -> str | None:
        """One line for `loopx status` while a notification target fails; None otherwise (or unset)."""
        if not outbox_path(self.layout).exists():
            return None
        outbox = load_outbox(self.layout)
        if not outbox.failing_targets:
            return None
        return (
            f"notifications: {len(outbox.failing_targets)} target(s) failing, "
            f"{len(outbox.pending)} pending: {outbox.last_error} "
            f"(retried with backoff; `loopx notify list`)"
        )

    def add(
        self,
        url: str,
        *,
        events: str | None = None,
        link_base: str | None = None,
        read_timeout_s: float | None = None,
        now: datetime | None = None,
    ) -> NotifyTarget:
        """`loopx notify add URL`: send ``events`` (comma-separated kinds; all when None) to ``url``.

        What is already true when the first target is added (open gates, done
        goals) is remembered, not announced. ``read_timeout_s`` is how long its
        receiver may take to answer (default 15 s).

        Raises:
            InvalidNotifyUrlError: ``url`` or ``link_base`` is not a usable URL.
            InvalidEventsError: ``events`` names an unknown kind.
            InvalidTimeoutError: ``read_timeout_s`` is out of range.
        """
        at = now or utcnow()
        target = add_target(
            self.layout,
            url,
            parse_events(events),
            now=at,
            link_base=link_base,
            read_timeout_s=read_timeout_s,
        )
        self._baseline(at)
        return target

    def _baseline(self, now: datetime) -> None:
        from loopx.notify.deliver import open_gates  # noqa: PLC0415 - with the projection
        from loopx.notify.events import conditions  # noqa: PLC0415
        from loopx.notify.outbox import record_events  # noqa: PLC0415
        from loopx.status.current import current_status, refresh_status  # noqa: PLC0415 - heavy

        ensure_dir(outbox_path(self.layout).parent)
        with locked(outbox_path(self.layout)):
            outbox = load_outbox(self.layout)
            if outbox.baselined:
                return
            refresh_status(self.layout, now=now, ttl_s=0.0)
            projection = current_status(self.layout, now=now)
            current = conditions(projection, open_gates(self.layout, projection))
            outbox, _ = record_events(outbox, current, {}, now=now)
            save_outbox(self.layout, outbox)

    def remove(self, target: str) -> NotifyTarget:
        """`loopx notify remove ID`: stop sending to the target ``ID`` (or that URL).

        Raises:
            NotifyTargetNotFoundError: no target has that id or URL.
        """
        return remove_target(self.layout, target)

    def test(self, target: str | None = None) -> NotifyTestReport:
        """`loopx notify test [ID]`: send a test message now to every target (or ``ID``).

        Raises:
            NotifyTargetNotFoundError: ``target`` names no target.
        """
        from loopx.notify.deliver import send_message  # noqa: PLC0415 - apprise
        from loopx.notify.links import link_base  # noqa: PLC0415 - small
        from loopx.notify.targets import NotifyTargetNotFoundError  # noqa: PLC0415

        config = load_config(self.layout)
        targets = [t for t in config.targets if target is None or target in (t.id, t.url)]
        if target is not None and not targets:
            raise NotifyTargetNotFoundError(redact_url(target) if "://" in target else target)
        base = link_base(self.layout, config) or f"({NO_LINK_BASE})"
        results = []
        for t in targets:
            sent = send_message(
                t.url,
                "LoopX test",
                f"Notifications from LoopX reach you.\n{base}",
                read_timeout_s=t.read_timeout_s,
            )
            results.append(
                TestDelivery(
                    id=t.id, url=redact_url(t.url), ok=sent.error is None, error=sent.error
                )
            )
        return NotifyTestReport(results=results)
