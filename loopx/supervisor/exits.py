"""An agent's end: saying how it died (and its last words), and its slot's restart bookkeeping.

:func:`settle_exit` applies :func:`loopx.supervisor.backoff.decide_restart`
to a slot; the fleet calls it for every agent it finds gone.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

from loopx.errors import CorruptFileError
from loopx.fleet import AgentHeartbeat, ExitStatus
from loopx.log import get_logger
from loopx.process import ProcessIdentity
from loopx.storage.files import read_model_or_none
from loopx.supervisor.backoff import RestartPolicy, decide_restart
from loopx.supervisor.slot import Slot

log = get_logger(__name__)

LAST_LINES: Final = 12
LAST_BYTES: Final = 8192


def working_on(heartbeat: Path, ref: ProcessIdentity | None) -> dict[str, str]:
    """``goal_id`` and ``turn_key`` of the turn agent ``ref`` was on, from its heartbeat.

    Empty when the heartbeat names none, or is another process's (a reused slot), so every
    log line about an agent's end carries the goal it concerns (``jq 'select(.goal_id == G)'``).
    """
    try:
        beat = read_model_or_none(heartbeat, AgentHeartbeat)
    except CorruptFileError:
        return {}
    if beat is None or ref is None or beat.pid != ref.pid or beat.goal_id is None:
        return {}
    about = {"goal_id": beat.goal_id}
    if beat.turn_key is not None:
        about["turn_key"] = beat.turn_key
    return about


def log_exit(slot: Slot, how: ExitStatus, log_path: Path, about: dict[str, str]) -> None:
    """Log the end of the slot's agent; an unclean one with its log and its last lines.

    ``about``: the goal and turn it was on (:func:`working_on`), on the line.
    """
    ref = slot.ref
    pid = ref.pid if ref else None
    if how.clean:
        log.info("agent_exited", agent_id=slot.agent_id, pid=pid, how=how.describe(), **about)
        return
    # rq's monitor_work_horse: say precisely how it died, and what it said last.
    log.warning(
        "agent_exited",
        agent_id=slot.agent_id,
        pid=pid,
        how=how.describe(),
        log=str(log_path),
        last_output=last_lines(log_path),
        **about,
    )


def settle_exit(
    slot: Slot,
    how: ExitStatus,
    policy: RestartPolicy,
    *,
    now: float,
    restart: bool,
    about: dict[str, str] | None = None,
) -> None:
    """Empty the slot; with ``restart``, schedule the next start (backoff, crash loop).

    ``about``: the goal and turn the agent was on, on the crash loop's line.
    """
    slot.agent, slot.last_exit = None, how
    if not restart:
        slot.next_start = None
        return
    decision = decide_restart(policy, [] if how.clean else slot.restart_times, now=now)
    if not how.clean:
        slot.restart_times = [t for t in slot.restart_times if now - t < policy.window_s]
        slot.restart_times.append(now)
        slot.recent_restarts = decision.recent_restarts
        if decision.crash_loop and not slot.crash_loop:
            log.error(
                "agent_crash_loop",
                agent_id=slot.agent_id,
                restarts=decision.recent_restarts,
                **(about or {}),
            )
        slot.crash_loop = decision.crash_loop
    slot.restarts += 1
    slot.next_start = now + decision.delay_s


def last_lines(path: Path, count: int = LAST_LINES) -> list[str]:
    """The last lines of an agent's log (its last words), or [] when there is none."""
    try:
        with path.open("rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - LAST_BYTES))
            tail = f.read().decode("utf-8", errors="replace")
    except OSError:
        return []
    return [line for line in tail.splitlines() if line.strip()][-count:]
