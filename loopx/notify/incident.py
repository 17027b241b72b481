"""The supervisor's own death, told by its successor when nobody else saw it.

While ``loopx serve`` runs, it sees a dead supervisor at its next refresh (the
status projection's ``supervisor_down`` incident) and sends "the supervisor is
down"; the restarted supervisor's first pass then sends "running again". When
no server ran, nobody could: the restarted supervisor finds its predecessor's
record still saying it runs, and records the "down" and "recovered" pair at its
start, unless the outbox shows the "down" already seen.
"""

from __future__ import annotations

from datetime import datetime

from loopx.errors import LockTimeoutError
from loopx.notify.events import SUPERVISOR_DOWN, NotifyEvent, recovered, supervisor_down
from loopx.notify.outbox import load_outbox, outbox_path, pend, save_outbox
from loopx.notify.targets import load_config
from loopx.root import Layout
from loopx.storage.locks import locked

LOCK_TIMEOUT_S = 5.0  # a pass in flight holds the outbox for at most a POST's timeout


def record_restart(
    layout: Layout, *, pid: int, last_heard: datetime | None, now: datetime
) -> list[NotifyEvent]:
    """Record the "down" and "recovered" pair for a predecessor ``pid`` that died; the events.

    Nothing when notifications are not set up, or the "down" was already
    seen (it is then in the outbox's conditions, and the next pass sends the
    "recovered" by itself), or a pass holds the outbox for longer than
    ``LOCK_TIMEOUT_S``.
    """
    config = load_config(layout)
    if not config.targets or not outbox_path(layout).exists():
        return []
    try:
        with locked(outbox_path(layout), timeout=LOCK_TIMEOUT_S):
            outbox = load_outbox(layout)
            if not outbox.baselined or SUPERVISOR_DOWN in outbox.active:
                return []
            last = f" (last heard from at {last_heard:%H:%M:%S} UTC)" if last_heard else ""
            down = supervisor_down(
                f"the supervisor (pid {pid}) ended without a stop{last}; "
                f"a new one started at {now:%H:%M:%S} UTC",
                last_heard or now,
            )
            back = recovered(SUPERVISOR_DOWN, now)
            events = [down] if back is None else [down, back]
            kinds = {t.id: {k.value for k in t.kinds} for t in config.targets}
            pending = [*outbox.pending, *pend(events, kinds, now)]
            save_outbox(layout, outbox.model_copy(update={"pending": pending}))
    except LockTimeoutError:
        return []
    return events
