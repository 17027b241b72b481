"""The stall ladder's pure rules, its detection in the host runner, and what status shows of it."""

from __future__ import annotations

import os
import sys
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from loopx.agents.hostlimits import Limits, Observation, kill_reason
from loopx.agents.hostrun import run_host
from loopx.agents.hosts.diagnosis import Diagnosis, diagnose, failure_for
from loopx.registry.goalrecords import HostKind
from loopx.root import Layout
from loopx.state import GoalState, HostSession
from loopx.status.inputs import GoalInputs
from loopx.status.projection import project_goal
from loopx.testing.status_fixtures import make_goal
from loopx.turn.failures import FailureReason
from loopx.turn.journal import HostOutcome, TurnJournal, TurnPlan, write_journal_unfenced
from loopx.turn.lease import Lease
from loopx.turn.outcome import ResultKind
from loopx.turn.protocol import Envelope
from loopx.turn.stall import (
    MAX_RESUMES_PER_DAY,
    Rung,
    RungRun,
    StallLadder,
    StallSeen,
    activity,
    climbed,
    gate_result,
    may_climb,
    stall_cause,
    stalled_envelope,
)
from loopx.turn.steps.context import TurnConfig, TurnContext, TurnOptions
from loopx.turn.steps.stalling import (
    fresh_session,
    gate_stall,
    resume_session,
    resumes_in_window,
)
from tests.turnkit import make_root

NOW = datetime(2026, 1, 2, 12, 0, tzinfo=UTC)
SESSION = HostSession(kind="claude", session_id="s-1", turns=1)


def _ladder(*rungs: Rung, at: datetime = NOW) -> StallLadder:
    return StallLadder(
        seen=[StallSeen(on=None, cause="silent", at=at)],
        runs=[RungRun(rung=r, at=at) for r in rungs],
        session=SESSION,
    )


def _climb(ladder: StallLadder | None, rung: Rung, *, resumes: int = 0, now: datetime = NOW):
    return may_climb(ladder, rung, now=now, resumes=resumes, turn_timeout_s=600)


def test_a_first_stall_climbs_to_resume() -> None:
    """The turn's own run stalled: rung 1 may run."""
    assert _climb(None, Rung.RESUME)


def test_each_rung_is_bounded_in_runs() -> None:
    """Resume runs twice, a fresh session once; the gate and the hand-off start no host."""
    assert _climb(_ladder(Rung.RESUME), Rung.RESUME)
    assert not _climb(_ladder(Rung.RESUME, Rung.RESUME), Rung.RESUME)
    assert _climb(_ladder(Rung.RESUME, Rung.RESUME), Rung.FRESH)
    assert not _climb(_ladder(Rung.RESUME, Rung.RESUME, Rung.FRESH), Rung.FRESH)
    assert not _climb(None, Rung.HANDOFF)
    assert not _climb(None, Rung.GATE)


def test_a_rung_is_bounded_in_time() -> None:
    """A rung starts no run past the turn timeout from its first run."""
    late = NOW + timedelta(seconds=601)
    assert not _climb(_ladder(Rung.RESUME), Rung.RESUME, now=late)


def test_the_ladder_never_steps_down() -> None:
    """Once on the fresh-session rung, resume is not tried again."""
    assert not _climb(_ladder(Rung.RESUME, Rung.FRESH), Rung.RESUME)


def test_automatic_resumes_are_bounded_per_goal_per_day() -> None:
    """At the daily bound no rung runs a host: the stall goes to the gate."""
    assert not _climb(None, Rung.RESUME, resumes=MAX_RESUMES_PER_DAY)
    assert _climb(None, Rung.RESUME, resumes=MAX_RESUMES_PER_DAY - 1)


def test_climbing_records_the_stall_and_the_run() -> None:
    """The stall seen names the run that stalled; the session to resume is the stalled one's."""
    ladder = climbed(
        None, Rung.RESUME, cause="silent", stalled_at=NOW, session=SESSION, output="x", now=NOW
    )
    again = climbed(
        ladder, Rung.RESUME, cause="again", stalled_at=NOW, session=None, output="y", now=NOW
    )
    assert [s.on for s in again.seen] == [None, Rung.RESUME]
    assert [r.rung for r in again.runs] == [Rung.RESUME, Rung.RESUME]
    assert (again.session, again.last_output) == (SESSION, "y")


def _envelope() -> Envelope:
    return Envelope(
        goal_id="g",
        turn_key="g-t000001-e1",
        seq=1,
        epoch=1,
        objective="o",
        workdir="/w",
        root="/r",
        result_file="/r/x.json",
        turn_timeout_s=600,
        deadline_at=NOW,
        state=GoalState(goal_id="g"),
    )


def test_resume_continues_the_stalled_session_and_fresh_starts_none() -> None:
    """Rung 1's envelope names the stalled session; rung 2's none; both say why."""
    resume = stalled_envelope(_envelope(), _ladder(Rung.RESUME))
    fresh = stalled_envelope(_envelope(), _ladder(Rung.RESUME, Rung.FRESH))
    assert resume.state.host_session == SESSION
    assert fresh.state.host_session is None
    assert "Continue where you left off" in (resume.stalled or "")
    assert "fresh session" in (fresh.stalled or "")
    assert stalled_envelope(_envelope(), None) == _envelope()


def test_the_gate_carries_what_was_tried_and_the_last_output() -> None:
    """The gate's question lists the stalls and the last lines; evidence host_stalled."""
    ladder = _ladder(Rung.RESUME).model_copy(update={"last_output": "last words"})
    result = gate_result(ladder, turn_key="k", goal_id="g")
    assert result.kind is ResultKind.NEEDS_HUMAN
    assert result.evidence == [FailureReason.HOST_STALLED.value]
    assert "the turn stalled at 12:00:00 UTC: silent" in (result.question or "")
    assert "last words" in (result.question or "")


def test_what_counts_as_a_stall() -> None:
    """LoopX's stall kill and the adapter's host_stalled reading; nothing else."""
    assert stall_cause(FailureReason.HOST_STALLED, None, "") is not None
    assert stall_cause(None, FailureReason.HOST_STALLED, "idle") == "idle"
    assert stall_cause(FailureReason.TURN_TIMEOUT, None, "") is None
    assert stall_cause(None, FailureReason.HOST_SERVER_ERROR, "500") is None


@pytest.mark.parametrize(
    "message",
    [
        "stream disconnected before completion: idle timeout waiting for SSE",
        "API Error: Request timed out.",
    ],
)
def test_a_host_s_own_idle_timeout_reads_as_stalled(message: str) -> None:
    """Codex's and Claude Code's own stream idle timeouts are host_stalled."""
    assert diagnose(message) is Diagnosis.STALLED
    failure = failure_for("codex", message, default=FailureReason.HOST_EXECUTION_ERROR)
    assert failure.reason is FailureReason.HOST_STALLED


def test_kill_reason_stops_a_quiet_host_past_its_stall_timeout() -> None:
    """Quiet longer than the stall timeout: host_stalled; without one, never."""
    limits = Limits(timeout_s=600, stall_timeout_s=5)
    quiet = Observation(elapsed_s=10, rss_bytes=0, stop_requested=False, quiet_s=6)
    talking = Observation(elapsed_s=10, rss_bytes=0, stop_requested=False, quiet_s=1)
    assert kill_reason(quiet, limits) is FailureReason.HOST_STALLED
    assert kill_reason(talking, limits) is None
    assert kill_reason(quiet, Limits(timeout_s=600)) is None


def _run(tmp_path: Path, script: str, stall_s: float, activity: tuple[str, ...] = ()):
    return run_host(
        [sys.executable, "-c", script],
        stdin=b"",
        cwd=tmp_path,
        env={**os.environ, "LOOPX_TURN_KEY": "k", "LOOPX_ROOT": str(tmp_path)},
        limits=Limits(
            timeout_s=60, stall_timeout_s=stall_s, kill_grace_s=0.5, activity_paths=activity
        ),
        turn_key="k",
        loopx_root=str(tmp_path),
    )


def test_a_silent_host_is_stopped_as_stalled(tmp_path: Path) -> None:
    """A host that prints once and then says nothing is killed host_stalled."""
    run = _run(tmp_path, "import time; print('hi', flush=True); time.sleep(60)", 0.5)
    assert run.killed is FailureReason.HOST_STALLED
    assert run.stdout.text() == "hi\n"


def test_a_host_that_keeps_writing_is_not_stalled(tmp_path: Path) -> None:
    """Output more often than the stall timeout keeps the host running to its end."""
    script = "import time\nfor _ in range(8):\n    print('.', flush=True); time.sleep(0.2)"
    run = _run(tmp_path, script, 1.0)
    assert (run.killed, run.exit_code) == (None, 0)


def test_status_shows_the_last_output_and_the_rung() -> None:
    """A running goal's explanation and lease view carry the last output time and the rung."""
    lease = Lease(
        goal_id="g1",
        agent_id="a1",
        pid=1,
        pid_started_at=0.0,
        hostname="h",
        epoch=1,
        acquired_at=NOW - timedelta(minutes=6),
        renewed_at=NOW,
        expires_at=NOW + timedelta(seconds=30),
        last_output_at=NOW - timedelta(minutes=5),
        activity=activity(Rung.RESUME),
    )
    goal = make_goal("g1", now=NOW - timedelta(days=1), workdir=Path("/tmp"))
    view = project_goal(GoalInputs(goal=goal, lease=lease), now=NOW)
    assert view.explanation.endswith(
        "; last output 2026-01-02T11:55:00Z; stalled: rung 1 of 4, resuming session"
    )
    assert view.lease is not None
    assert view.lease.last_output_at == NOW - timedelta(minutes=5)


def _stalled_ctx(tmp_path: Path, *, stop: bool) -> TurnContext:
    envelope = _envelope()
    plan = TurnPlan(envelope=envelope, host_kind=HostKind.CLAUDE, argv=[], turn_timeout_s=600)
    outcome = HostOutcome(
        killed=FailureReason.HOST_STALLED,
        stdout='{"type": "system"}\n',
        started_at=NOW,
        ended_at=NOW,
    )
    journal = TurnJournal(
        loopx_version="0", goal_id="g", agent_id="a", turn_key=envelope.turn_key, seq=1, epoch=1,
        plan=plan, outcome=outcome, created_at=NOW, updated_at=NOW,
    )  # fmt: skip
    event = threading.Event()
    if stop:
        event.set()
    goal = make_goal("g", now=NOW, workdir=tmp_path)
    layout = Layout.at(tmp_path)
    options = TurnOptions(stop=event)
    return TurnContext(layout, goal, "a", TurnConfig(), options, None, journal=journal)  # type: ignore[arg-type]


@pytest.mark.parametrize("row", [resume_session, fresh_session, gate_stall])
def test_a_stop_while_stalled_ends_the_turn_stopped_not_gated(tmp_path: Path, row) -> None:
    """A stop request during the ladder: no rung runs, the outcome is a stopped host's."""
    ctx = row(_stalled_ctx(tmp_path, stop=True))
    assert ctx.planned.outcome.killed is FailureReason.STOPPED
    assert ctx.planned.stall is None


def test_the_gate_row_turns_the_stall_into_a_needs_human_outcome(tmp_path: Path) -> None:
    """The gate row: no kill, no failure, a needs_human result; the ladder records the gate."""
    ctx = gate_stall(_stalled_ctx(tmp_path, stop=False))
    outcome = ctx.planned.outcome
    assert (outcome.killed, outcome.failure) == (None, None)
    assert outcome.result.kind is ResultKind.NEEDS_HUMAN
    assert [r.rung for r in ctx.planned.stall.runs] == [Rung.GATE]
    assert '{"type": "system"}' in outcome.result.question


def test_resumes_are_counted_over_the_goal_s_journals_of_the_last_day(tmp_path: Path) -> None:
    """This turn's resumes and those of the goal's other journals within 24 hours; gates not."""
    layout = make_root(tmp_path / "root")
    now = datetime.now(UTC)
    ladder = _ladder(Rung.RESUME, Rung.FRESH, Rung.GATE, at=now - timedelta(hours=1))
    old = _ladder(Rung.RESUME, at=now - timedelta(hours=30))
    base = _stalled_ctx(tmp_path, stop=False).planned
    layout.turns_dir("g").mkdir(parents=True)
    for seq, stall in ((1, ladder), (2, old)):
        key = f"g-t{seq:06d}-e1"
        journal = base.model_copy(update={"turn_key": key, "seq": seq, "stall": stall})
        write_journal_unfenced(layout, journal)
    current = base.model_copy(
        update={"turn_key": "g-t000003-e1", "seq": 3, "stall": _ladder(Rung.RESUME, at=now)}
    )
    assert resumes_in_window(layout, current, now) == 3


def test_a_host_that_writes_only_its_session_records_is_not_stalled(tmp_path: Path) -> None:
    """Quiet pipes, but a file under its activity folder keeps moving: it runs to its end;
    once the file stops moving too, it is stalled."""
    records = tmp_path / "sessions" / "2026" / "12"
    records.mkdir(parents=True)
    script = (
        "import time, pathlib\n"
        f"p = pathlib.Path({str(records / 'rollout.jsonl')!r})\n"
        "for _ in range(12):\n"
        "    with p.open('a') as f: f.write('{}\\n')\n"
        "    time.sleep(0.25)\n"
    )
    sessions = str(tmp_path / "sessions")
    run = _run(tmp_path, script, 1.0, (sessions,))
    assert (run.killed, run.exit_code) == (None, 0)
    silent = _run(tmp_path, script + "time.sleep(60)\n", 1.0, (sessions,))
    assert silent.killed is FailureReason.HOST_STALLED
