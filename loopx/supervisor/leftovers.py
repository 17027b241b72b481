"""What a fleet leaves behind: a previous (SIGKILLed) supervisor's agents and turns, and this one's at its end.

Zero survivors either way: the processes a ``supervisor.json`` names, every
process whose environment names this root and an agent (``LOOPX_*``), and
at the end this supervisor's own descendants (the tmux server, a host an
agent detached) are killed as a tree. The turns a previous fleet left half-done are
recovered before the first agent starts (:func:`recover_turns`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from typing import Final

import psutil

from loopx import environ, process
from loopx.errors import resource_fault
from loopx.fleet import FleetRecord
from loopx.log import get_logger
from loopx.root import Layout
from loopx.supervisor.process import fleet_processes, reap_orphans
from loopx.supervisor.tmux import TmuxSession
from loopx.turn.recovery import recover

log = get_logger(__name__)

REAP_GRACE_S: Final = 5.0  # a previous fleet's leftovers get this long after SIGTERM


def reap_previous(
    layout: Layout, previous: FleetRecord | None, me_pid: int, grace_s: float
) -> None:
    """Kill every process a previous supervisor's fleet left running (its record's, the root's)."""
    procs: dict[int, psutil.Process] = {}
    if previous is not None and previous.pid != me_pid:
        for slot in previous.slots:
            if slot.pid is None or slot.pid_started_at is None:
                continue
            found = process.ProcessIdentity(slot.pid, slot.pid_started_at).find()
            if found is not None:
                procs.update({p.pid: p for p in process.tree(found)})
    procs.update({p.pid: p for p in fleet_processes(layout.root)})
    procs.pop(me_pid, None)
    if procs:
        log.warning("reaping_previous_fleet", pids=sorted(procs))
        _log_turns("previous_fleet_host_reaped", procs.values(), warn=True)
        survivors = process.kill_tree(list(procs.values()), grace_s=min(REAP_GRACE_S, grace_s))
        if survivors:
            log.error("previous_fleet_survivors", pids=[p.pid for p in survivors])
    if previous is not None and previous.tmux_session is not None:
        with contextlib.suppress(Exception):
            TmuxSession(layout.root).kill_server()
    reap_orphans()


def _log_turns(event: str, procs: Iterable[psutil.Process], *, warn: bool) -> None:
    """One line per goal's turn whose host processes are among ``procs``, naming goal and turn.

    A host's environment names them (``LOOPX_GOAL_ID``, ``LOOPX_TURN_KEY``); an agent's does not.
    """
    turns: dict[tuple[str, str | None], list[int]] = {}
    for proc in procs:
        try:
            env = proc.environ()
        except (psutil.Error, OSError):
            continue
        goal_id = env.get(environ.GOAL_ID)
        if goal_id:
            turns.setdefault((goal_id, env.get(environ.TURN_KEY)), []).append(proc.pid)
    for (goal_id, turn_key), pids in sorted(turns.items(), key=lambda t: (t[0][0], t[0][1] or "")):
        (log.warning if warn else log.info)(
            event, goal_id=goal_id, turn_key=turn_key, pids=sorted(pids)
        )


def kill_leftovers(layout: Layout, me_pid: int, *, expected: bool) -> None:
    """SIGKILL this fleet's remaining processes and this process's descendants.

    ``expected``: every agent stopped cleanly, so what is left is the tmux
    server and its status window, not worth a warning.
    """
    leftovers: dict[int, psutil.Process] = {p.pid: p for p in fleet_processes(layout.root)}
    with contextlib.suppress(psutil.NoSuchProcess):
        leftovers.update({p.pid: p for p in psutil.Process().children(recursive=True)})
    leftovers.pop(me_pid, None)
    if leftovers:
        (log.info if expected else log.warning)("killing_leftovers", pids=sorted(leftovers))
        _log_turns("leftover_host_killed", leftovers.values(), warn=not expected)
        process.kill_tree(list(leftovers.values()), grace_s=0)
    reap_orphans()


def recover_turns(layout: Layout) -> str | None:
    """Recover what the previous fleet's turns left; the resource fault that deferred it, if one.

    Raises:
        OSError: a failure that is not a resource fault (ENOSPC, EMFILE...).
    """
    try:
        report = recover(layout)
    except OSError as e:
        reason = resource_fault(e)
        if reason is None:
            raise
        # Agents recover each goal's journal at their next claim anyway.
        log.warning("recovery_deferred", reason=reason)
        return reason
    log.info(
        "recovery_done",
        actions=len(report.actions),
        quarantined=len(report.quarantined),
        busy_goals=report.busy_goals,
        errors=report.errors,
    )
    return None
