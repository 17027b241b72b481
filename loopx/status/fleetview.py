"""The fleet's part of the status projection: the supervisor and its agents, summarised. Pure.

:func:`fleet_view` reads the supervisor record and the agents' heartbeats,
corrected by what the processes say now; :func:`overlay_crash_loop` turns a
goal no healthy agent can work on into a human's ``crash_loop``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from loopx.fleet import ACTIVE_STATES, AgentHeartbeat, FleetRecord, FleetState
from loopx.status.view import Actor, FleetView, GoalStatusView, StatusReason

HEARTBEAT_STALE_S: Final = 30.0  # an agent whose last beat is older is not counted alive


@dataclass(frozen=True, slots=True)
class FleetLiveness:
    """What the processes and the filesystem say now, beside the files (gathered by the caller)."""

    supervisor_alive: bool | None = None  # None: not checked
    live_agents: frozenset[str] | None = None  # agent ids whose process runs; None: not checked
    degraded: str | None = None


def fleet_view(
    fleet: FleetRecord | None,
    heartbeats: Iterable[AgentHeartbeat],
    *,
    now: datetime,
    live: FleetLiveness | None = None,
) -> FleetView:
    """The supervisor record and heartbeats summarised, corrected by ``live``. Pure.

    A record is only what its writer last said: a supervisor SIGKILLed (or
    one that just stopped) leaves ``running`` behind, so the state is
    ``dead`` when its process is gone, and only agents whose process runs
    count as alive.
    """
    live = live or FleetLiveness()
    stale = now - timedelta(seconds=HEARTBEAT_STALE_S)
    alive = sum(
        1
        for h in heartbeats
        if h.beat_at >= stale
        and h.phase != "stopping"
        and (live.live_agents is None or h.agent_id in live.live_agents)
    )
    if fleet is None:
        return FleetView(agents_alive=alive, degraded=live.degraded)
    state = fleet.state
    if live.supervisor_alive is False and state in ACTIVE_STATES:
        state = FleetState.DEAD
    return FleetView(
        state=state,
        pid=fleet.pid,
        degraded=live.degraded,
        agents_wanted=fleet.agents_wanted,
        agents_alive=alive,
        restarts=sum(s.restarts for s in fleet.slots),
        crash_loop_agents=[s.agent_id for s in fleet.slots if s.crash_loop],
        updated_at=fleet.updated_at,
    )


def overlay_crash_loop(view: GoalStatusView, fleet: FleetView) -> GoalStatusView:
    """Mark a ready/running goal ``crash_loop`` when no healthy agent can work on it. Pure."""
    if not fleet.crash_loop_agents or view.reason not in {StatusReason.READY, StatusReason.RUNNING}:
        return view
    looping = set(fleet.crash_loop_agents)
    holder = view.lease.agent_id if view.lease is not None else None
    all_looping = fleet.agents_wanted > 0 and len(looping) >= fleet.agents_wanted
    if holder in looping:
        why = f"agent {holder}, which holds the lease, is in a crash loop"
    elif view.reason is StatusReason.READY and all_looping:
        why = "every agent slot is in a crash loop, so no agent can take the goal"
    else:
        return view
    return view.model_copy(
        update={
            "actor": Actor.HUMAN,
            "reason": StatusReason.CRASH_LOOP,
            "explanation": f"{why}; see `loopx supervisor status` and logs/",
        }
    )
