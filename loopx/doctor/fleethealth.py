"""The supervisor record and agent heartbeats: a dead supervisor, crash loops, stale agents."""

from __future__ import annotations

import os
from typing import Final

from loopx.doctor.findings import Checker, FindingCode, Severity, q
from loopx.fleet import AgentHeartbeat, FleetRecord
from loopx.process import ProcessIdentity

_ACTIVE_SUPERVISOR_STATES: Final = frozenset({"starting", "running", "stopping"})


def check_fleet(doc: Checker) -> None:
    """``supervisor.json`` and every agent heartbeat."""
    path = doc.layout.supervisor_file
    record = doc.model(
        path,
        FleetRecord,
        f"rm {q(path)}  (rewritten by the next supervisor)",
        severity=Severity.WARNING,
    )
    supervisor_alive = False
    if isinstance(record, FleetRecord):
        supervisor_alive = ProcessIdentity(record.pid, record.pid_started_at).alive()
        if record.state in _ACTIVE_SUPERVISOR_STATES and not supervisor_alive:
            doc.add(
                Severity.WARNING,
                FindingCode.SUPERVISOR_DEAD,
                path,
                f"the supervisor (pid {record.pid}) is recorded as {record.state} but is "
                "gone; turns it ran may be unfinished",
                f"loopx supervisor start --agents {record.agents_wanted}  (reaps what is "
                "left, recovers its turns and replaces the record)",
            )
        elif supervisor_alive:
            doc.add(
                Severity.INFO,
                FindingCode.SUPERVISOR_RUNNING,
                path,
                f"supervisor pid {record.pid} is {record.state} with "
                f"{record.agents_wanted} agent(s)",
            )
            for slot in record.slots:
                if slot.crash_loop:
                    log_file = doc.layout.logs_dir / f"agent-{slot.index}.log"
                    doc.add(
                        Severity.WARNING,
                        FindingCode.CRASH_LOOP,
                        path,
                        f"agent slot {slot.index} ({slot.agent_id}) is in a crash loop: "
                        f"{slot.recent_restarts} recent restarts, last "
                        f"{slot.last_exit.describe() if slot.last_exit else '-'}",
                        f"read {q(log_file)}, fix the cause, then "
                        "`loopx supervisor stop` and start it again",
                    )
    agents = doc.layout.agents_dir
    for name in sorted(os.listdir(agents)) if agents.is_dir() else []:
        beat_path = agents / name
        if not name.endswith(".json") or name.startswith("."):
            continue
        beat = doc.model(
            beat_path,
            AgentHeartbeat,
            f"rm {q(beat_path)}  (rewritten by the agent every few seconds)",
            severity=Severity.WARNING,
        )
        if (
            isinstance(beat, AgentHeartbeat)
            and not supervisor_alive
            and not ProcessIdentity(beat.pid, beat.pid_started_at).alive()
            and beat.phase != "stopping"
        ):
            doc.add(
                Severity.INFO,
                FindingCode.STALE_HEARTBEAT,
                beat_path,
                f"agent {beat.agent_id} (pid {beat.pid}) is gone",
                f"rm {q(beat_path)}",
            )
