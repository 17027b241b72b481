"""A root that looks like a working fleet, for dashboard tests, screenshots and benchmarks.

Goals in every state the dashboard shows: open gates, failing, paused, running
(a live lease held by a heartbeating agent), waiting, ready, done, plus a
supervisor record and agent heartbeats. Written with the real models and file
primitives; nothing runs.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta
from pathlib import Path

from loopx.fleet import AgentHeartbeat, AgentPhase, AgentSlot, ExitKind, ExitStatus, FleetRecord
from loopx.quota.ledger import SpendRecord
from loopx.registry.goalrecords import GoalStatus
from loopx.registry.quota_policy import QuotaPolicy
from loopx.root import Layout
from loopx.state import Gate, GoalState, Todo, TodoStatus
from loopx.storage.files import atomic_write_bytes, atomic_write_model
from loopx.testing.status_fixtures import (
    append_history,
    history_line,
    make_goal,
    register_goals,
    write_lease,
)
from loopx.turn.historyline import HistoryLine
from loopx.turn.outcome import ResultKind

QUESTIONS = (
    "Merge the refactor into main, or keep it on the branch?",
    "The staging database is 92% full. May I drop the old snapshots?",
    "Two tests contradict the spec. Which behaviour is right?",
)


def _state(goal_id: str, i: int, *, now: datetime, gate: str | None, failures: int) -> GoalState:
    gates = [Gate(id=1, question=gate, opened_at=now - timedelta(minutes=7 + i))] if gate else []
    return GoalState(
        goal_id=goal_id,
        beliefs=[
            "the parser handles every fixture in tests/data",
            f"step {i % 7 + 2} of the migration is the slow one",
        ],
        priorities=["keep main green", "small reviewable commits"],
        non_goals=["rewriting the CLI"],
        next_action="run the integration suite against the new schema",
        todos=[
            Todo(id="1", text="write the migration", status=TodoStatus.DONE),
            Todo(id="2", text="backfill the old rows"),
            Todo(id="3", text="drop the shadow table"),
        ],
        gates=gates,
        turn_seq=3,
        consecutive_failures=failures,
        updated_at=now,
    )


def seed_fleet_root(layout: Layout, n: int, *, now: datetime, workdir: Path) -> list[str]:
    """Register ``n`` goals in mixed states with a running supervisor; return their ids.

    Goal ``i`` is: a gate (i % 10 == 0 for the first three), failing (i == 5),
    paused (i == 6), running (i in 1..2), waiting (i % 10 == 7), done
    (i % 10 == 9), ready otherwise. Each has three turns of history.
    """
    ids = [f"goal-{i:05d}" for i in range(n)]
    goals = []
    for i, goal_id in enumerate(ids):
        status = GoalStatus.PAUSED if i == 6 else GoalStatus.ACTIVE  # noqa: PLR2004
        if i % 10 == 9:  # noqa: PLR2004
            status = GoalStatus.DONE
        goals.append(
            make_goal(
                goal_id,
                now=now,
                workdir=workdir,
                objective=f"Migrate service {i} to the new storage schema without downtime",
                priority=(i * 7) % 5,
                status=status,
                quota=QuotaPolicy(compute=0.25),
            )
        )
    register_goals(layout, goals)
    for i, goal_id in enumerate(ids):
        failures = 3 if i == 5 else 0  # noqa: PLR2004
        gate = QUESTIONS[i // 10] if i % 10 == 0 and i // 10 < len(QUESTIONS) else None
        lines = [
            history_line(
                goal_id,
                seq,
                ended_at=now - timedelta(minutes=50 - seq * 12 - i % 5),
                wall_s=40.0 + 25 * seq + i % 13,
                status="failed" if failures and seq > 0 else "committed",
                kind=None if failures and seq > 0 else ResultKind.PROGRESS,
                failure="host_exit" if failures and seq > 0 else None,
            )
            for seq in (1, 2, 3)
        ]
        append_history(layout, lines, fast=True)
        _spend(layout, lines)
        state = _state(goal_id, i, now=now, gate=gate, failures=failures)
        if i % 10 == 7:  # noqa: PLR2004
            state = state.model_copy(update={"next_eligible_at": now + timedelta(minutes=20)})
        atomic_write_bytes(
            layout.state_file(goal_id), state.model_dump_json().encode(), durable=False
        )
        _run_log(layout, goal_id, lines[-1].seq, failed=bool(failures))
    _fleet(layout, ids, now=now)
    return ids


def _spend(layout: Layout, lines: list[HistoryLine]) -> None:
    """The quota ledger records of ``lines`` (what quota_spend appends), in one write."""
    records = [
        SpendRecord(
            turn_key=line.turn_key,
            goal_id=line.goal_id,
            seq=line.seq,
            usage=line.usage,
            started_at=line.started_at,
            ended_at=line.ended_at,
        )
        for line in lines
    ]
    data = b"".join(r.model_dump_json().encode() + b"\n" for r in records)
    atomic_write_bytes(layout.quota_file(lines[0].goal_id), data, durable=False)


def _run_log(layout: Layout, goal_id: str, seq: int, *, failed: bool) -> None:
    outcome = "failed: host_exit (exit code 3)" if failed else "committed: progress"
    text = (
        f"# {goal_id} turn {seq}\n\n- outcome: {outcome}\n- agent: agent-1\n\n"
        "## Summary\n\nRan `pytest -q tests/integration`; 2 failures in the schema check.\n\n"
        "## Host output\n\n```\nE   AssertionError: column 'owner_id' missing\n```\n"
    )
    atomic_write_bytes(layout.runs_dir(goal_id) / f"{seq}.md", text.encode(), durable=False)


def _fleet(layout: Layout, ids: list[str], *, now: datetime) -> None:
    agents = 4
    slots = [AgentSlot(index=k, agent_id=f"agent-{k + 1}", pid=os.getpid()) for k in range(agents)]
    slots[3] = slots[3].model_copy(
        update={"restarts": 2, "last_exit": ExitStatus(kind=ExitKind.SIGNALLED, signal="SIGKILL")}
    )
    record = FleetRecord(
        pid=os.getpid(),
        pid_started_at=0.0,
        hostname="localhost",
        agents_wanted=agents,
        started_at=now - timedelta(hours=3),
        updated_at=now,
        slots=slots,
    )
    atomic_write_model(layout.supervisor_file, record)
    running = [g for k, g in enumerate(ids) if k in (1, 2)]
    for k, slot in enumerate(slots):
        goal_id = running[k] if k < len(running) else None
        if goal_id is not None:
            write_lease(
                layout,
                goal_id,
                now=now - timedelta(seconds=40),
                agent_id=slot.agent_id,
                epoch=4,
                ttl_s=600,
            )
        beat = AgentHeartbeat(
            agent_id=slot.agent_id,
            pid=os.getpid(),
            pid_started_at=0.0,
            hostname="localhost",
            phase=AgentPhase.RUNNING if goal_id else AgentPhase.IDLE,
            goal_id=goal_id,
            turn_key=f"{goal_id}-lease-4" if goal_id else None,
            turns_done=17 + k,
            started_at=now - timedelta(hours=3),
            beat_at=now,
        )
        atomic_write_model(layout.agent_file(slot.agent_id), beat)
