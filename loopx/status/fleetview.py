"""The fleet's part of the status projection: the supervisor and its agents, summarised. Pure.

:func:`fleet_view` reads the supervisor record and the agents' heartbeats,
corrected by what the processes say now, and names the fleet's incidents
(:func:`incidents`: the supervisor down, a crash loop, a disk limit);
:func:`overlay_crash_loop` turns a goal no healthy agent can work on into a
human's ``crash_loop``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from loopx.fleet import ACTIVE_STATES, AgentHeartbeat, FleetRecord, FleetState
from loopx.status.view import (
    Actor,
    FleetIncident,
    FleetView,
    GoalStatusView,
    IncidentKind,
    StatusReason,
)

HEARTBEAT_STALE_S: Final = 30.0  # an agent whose last beat is older is not counted alive
# The fleet's `degraded` text of the disk guards (retention's floor and quota).
DISK_PHRASES: Final = ("below the floor", "over its quota")


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
        view = FleetView(agents_alive=alive, degraded=live.degraded)
        return view.model_copy(update={"incidents": incidents(view)})
    state = fleet.state
    if live.supervisor_alive is False and state in ACTIVE_STATES:
        state = FleetState.DEAD
    view = FleetView(
        state=state,
        pid=fleet.pid,
        degraded=live.degraded,
        agents_wanted=fleet.agents_wanted,
        agents_alive=alive,
        restarts=sum(s.restarts for s in fleet.slots),
        crash_loop_agents=[s.agent_id for s in fleet.slots if s.crash_loop],
        updated_at=fleet.updated_at,
    )
    return view.model_copy(update={"incidents": incidents(view)})


def incidents(view: FleetView) -> list[FleetIncident]:
    """What needs a person about the fleet itself, most urgent first. Pure.

    The supervisor is down when its record says it runs and its process is
    gone (a SIGKILL, an OOM kill, a crash: a clean stop records ``stopped``);
    then no turn runs and no notification is sent by it. A crash loop is an
    agent slot the supervisor stopped restarting; a disk incident is a disk
    floor or quota that stops new turns.
    """
    found: list[FleetIncident] = []
    if view.state is FleetState.DEAD:
        last = f" (last heard from at {view.updated_at:%H:%M:%S} UTC)" if view.updated_at else ""
        found.append(
            FleetIncident(
                kind=IncidentKind.SUPERVISOR_DOWN,
                since=view.updated_at,
                explanation=f"the supervisor (pid {view.pid}) is down: its process is gone"
                f"{last} and no turn runs; start it again (`loopx supervisor start`, or "
                "`systemctl restart` its unit) and see its log for why it ended",
            )
        )
    if view.crash_loop_agents and view.state is not FleetState.DEAD:
        names = ", ".join(view.crash_loop_agents)
        found.append(
            FleetIncident(
                kind=IncidentKind.CRASH_LOOP,
                since=view.updated_at,
                explanation=f"agent(s) {names} crashed in a loop and are no longer restarted; "
                "see logs/ and `loopx supervisor status`, then restart the supervisor",
            )
        )
    if view.degraded and any(p in view.degraded for p in DISK_PHRASES):
        found.append(
            FleetIncident(
                kind=IncidentKind.DISK,
                explanation=f"no new turn starts: {view.degraded}; free space or raise the "
                "limit (docs/retention.md)",
            )
        )
    return found


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
