"""Realistic goal files for tests and benchmarks of the status layer.

Written with the same models and file primitives as the real writers, so a
test or the benchmark sees exactly the bytes a turn would leave behind.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from datetime import datetime, timedelta
from pathlib import Path

from loopx.quota.ledger import SpendRecord
from loopx.registry.goalrecords import Goal
from loopx.registry.quota_policy import QuotaPolicy
from loopx.registry.store import write_goals
from loopx.root import Layout
from loopx.state import Gate, GoalState
from loopx.storage.files import atomic_write_bytes, atomic_write_model, exclusive_create
from loopx.storage.jsonl import append_record
from loopx.turn.historyline import HistoryLine
from loopx.turn.lease import Lease
from loopx.turn.outcome import ResultKind
from loopx.usage import Usage


def make_goal(goal_id: str, *, now: datetime, workdir: Path, **fields: object) -> Goal:
    """A registry entry with defaults for everything but the id."""
    data: dict[str, object] = {
        "id": goal_id,
        "objective": f"objective of {goal_id}",
        "workdir": str(workdir),
        "created_at": now,
        "updated_at": now,
        **fields,
    }
    return Goal.model_validate(data)


def register_goals(layout: Layout, goals: Iterable[Goal]) -> None:
    """Add or replace goals (their goal files, synced once)."""
    write_goals(layout, goals)


def write_state(layout: Layout, state: GoalState) -> None:
    """Write a goal's state.json."""
    layout.ensure_goal_dirs(state.goal_id)
    atomic_write_model(layout.state_file(state.goal_id), state)


def history_line(
    goal_id: str,
    seq: int,
    *,
    ended_at: datetime,
    kind: ResultKind | None = ResultKind.PROGRESS,
    status: str = "committed",
    failure: str | None = None,
    summary: str = "",
    next_action: str | None = None,
    epoch: int | None = None,
    wall_s: float = 10.0,
) -> HistoryLine:
    """One history record as a committed (or failed) turn writes it."""
    return HistoryLine(
        turn_key=f"{goal_id}-{seq:06d}-{epoch or seq}",
        goal_id=goal_id,
        seq=seq,
        epoch=epoch or seq,
        agent_id="agent-1",
        status=status,
        kind=kind,
        failure=failure,
        summary=summary or f"turn {seq} of {goal_id}: advanced the work",
        next_action=next_action,
        usage=Usage(cpu_s=wall_s / 2, wall_s=wall_s, peak_rss_mb=50.0),
        started_at=ended_at - timedelta(seconds=wall_s),
        ended_at=ended_at,
    )


def append_history(layout: Layout, lines: Iterable[HistoryLine], *, fast: bool = False) -> None:
    """Append history lines; ``fast`` writes them in one go (benchmarks seed thousands)."""
    batch = list(lines)
    if not batch:
        return
    path = layout.history_file(batch[0].goal_id)
    if fast:
        data = b"".join(line.model_dump_json().encode() + b"\n" for line in batch)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        return
    for line in batch:
        append_record(path, line)


def append_spend(
    layout: Layout, goal_id: str, seq: int, *, ended_at: datetime, wall_s: float, cpu_s: float = 0.0
) -> None:
    """Append one quota ledger record."""
    append_record(
        layout.quota_file(goal_id),
        SpendRecord(
            turn_key=f"{goal_id}-{seq:06d}",
            goal_id=goal_id,
            seq=seq,
            usage=Usage(wall_s=wall_s, cpu_s=cpu_s),
            started_at=ended_at - timedelta(seconds=wall_s),
            ended_at=ended_at,
        ),
    )


def write_lease(
    layout: Layout,
    goal_id: str,
    *,
    now: datetime,
    agent_id: str = "agent-1",
    epoch: int = 1,
    ttl_s: float = 30.0,
) -> Lease:
    """Claim a goal's lease the way an agent does (exclusive create)."""
    lease = Lease(
        goal_id=goal_id,
        agent_id=agent_id,
        pid=os.getpid(),
        pid_started_at=0.0,
        hostname="localhost",
        epoch=epoch,
        turn_key=f"{goal_id}-lease-{epoch}",
        acquired_at=now,
        renewed_at=now,
        expires_at=now + timedelta(seconds=ttl_s),
    )
    layout.ensure_goal_dirs(goal_id)
    exclusive_create(layout.lease_file(goal_id), lease.model_dump_json().encode() + b"\n")
    return lease


def open_gate_state(goal_id: str, question: str, *, now: datetime) -> GoalState:
    """A state with one open gate."""
    return GoalState(
        goal_id=goal_id, gates=[Gate(id=1, question=question, opened_at=now)], updated_at=now
    )


def seed_goal(layout: Layout, goal_id: str, *, now: datetime, history: int, workdir: Path) -> Goal:
    """Files of a goal that ran ``history`` turns (benchmark data), not yet registered."""
    goal = make_goal(goal_id, now=now, workdir=workdir, quota=QuotaPolicy())
    layout.ensure_goal_dirs(goal_id)
    start = now - timedelta(hours=48)
    lines = [
        history_line(
            goal_id, seq, ended_at=start + timedelta(minutes=seq), next_action="keep going"
        )
        for seq in range(1, history + 1)
    ]
    append_history(layout, lines, fast=True)
    atomic_write_bytes(
        layout.state_file(goal_id),
        GoalState(goal_id=goal_id, next_action="keep going", turn_seq=history, updated_at=now)
        .model_dump_json(indent=2)
        .encode(),
    )
    return goal


def make_root(base: Path) -> Layout:
    """A fresh runtime root under ``base`` (mode 0700), with its subdirectories."""
    from loopx.root import open_root, resolve_root  # noqa: PLC0415 - keep the module's imports light

    root = base / "root"
    return open_root(resolve_root(flag=root, registry=None, env={}, home=base), create=True)
