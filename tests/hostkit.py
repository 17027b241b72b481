"""Helpers of the codex/claude host tests: goals, envelopes, running an invocation for real."""

from __future__ import annotations

import json
import os
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from loopx.agents.hosts.base import HostInvocation, HostOutput
from loopx.registry.goalrecords import Goal, HostKind, HostSpec
from loopx.state import GoalState, HostSession
from loopx.turn.protocol import Envelope

STARTED = datetime(2026, 1, 2, 3, 0, tzinfo=UTC)


def make_goal(tmp_path: Path, kind: HostKind, argv: list[str] | None = None, **host: Any) -> Goal:
    workdir = tmp_path / "work"
    workdir.mkdir(exist_ok=True)
    return Goal(
        id="g1",
        objective="make the tests pass",
        workdir=str(workdir),
        host=HostSpec(kind=kind, argv=argv or [], **host),
        created_at=STARTED,
        updated_at=STARTED,
    )


def make_envelope(
    tmp_path: Path,
    goal: Goal,
    *,
    session: HostSession | None = None,
    seq: int = 1,
    started: datetime = STARTED,
) -> Envelope:
    root = tmp_path / "root"
    turn_dir = root / "goals" / goal.id / "turns"
    turn_dir.mkdir(parents=True, exist_ok=True)
    state = GoalState(
        goal_id=goal.id,
        beliefs=["the parser is fine"],
        non_goals=["rewrite the CLI"],
        next_action="run pytest -x",
        host_session=session,
    )
    return Envelope(
        goal_id=goal.id,
        turn_key=f"{goal.id}-{seq}-1",
        seq=seq,
        epoch=1,
        objective=goal.objective,
        workdir=goal.workdir,
        root=str(root),
        result_file=str(turn_dir / f"{goal.id}-{seq}-1.result.json"),
        turn_timeout_s=600.0,
        deadline_at=started + timedelta(seconds=600),
        state=state,
    )


def run(invocation: HostInvocation, envelope: Envelope) -> HostOutput:
    """Spawn the invocation like the turn runner does (cwd = workdir), capture its output."""
    proc = subprocess.run(
        invocation.argv,
        input=invocation.stdin,
        capture_output=True,
        cwd=envelope.workdir,
        env={**os.environ, **invocation.env},
        timeout=60,
        check=False,
    )
    result_file = Path(envelope.result_file)
    return HostOutput(
        exit_code=proc.returncode,
        stdout=proc.stdout.decode(),
        stderr=proc.stderr.decode(),
        result_file_text=result_file.read_text() if result_file.exists() else None,
    )


def log_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def use_fake_cli(tmp_path: Path, monkeypatch: Any, name: str) -> Path:
    """Put the fake ``name`` CLI (codex or claude) first on PATH; returns its invocation log."""
    from loopx.testing import install_fake_host

    bin_dir = tmp_path / "bin"
    install_fake_host(bin_dir, name)
    prefix = f"FAKE_{name.upper()}"
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setenv(f"{prefix}_HOME", str(tmp_path / f"{name}-home"))
    log = tmp_path / f"{name}.log"
    monkeypatch.setenv(f"{prefix}_LOG", str(log))
    return log


def interpret_turn(
    tmp_path: Path,
    monkeypatch: Any,
    host: Any,
    mode: str,
    session: HostSession | None = None,
) -> tuple[Envelope, Any]:
    """Run one turn of ``host`` against its fake CLI in ``mode``: (envelope, interpretation)."""
    monkeypatch.setenv(f"FAKE_{host.kind.value.upper()}_MODE", mode)
    goal = make_goal(tmp_path, host.kind)
    envelope = make_envelope(tmp_path, goal, session=session)
    return envelope, host.interpret(envelope, run(host.prepare(goal, envelope), envelope))


def waits_until_the_printed_minute(wait_s: float, reset_in: int, started: datetime) -> bool:
    """Whether a wait from ``started`` ends with the minute a fake printed for ``reset_in``.

    The fake reads its own clock after ``started`` (and the epoch fake truncates it to the
    second), prints the reset to the minute, and the reader takes that minute's end: the
    wait lies between ``reset_in`` less a second and ``reset_in`` plus a minute plus the time
    the run took.
    """
    elapsed = (datetime.now(UTC) - started).total_seconds()
    return reset_in - 1 <= wait_s <= reset_in + 60 + elapsed
