"""Slot bookkeeping: resizing the fleet, settling an agent's exit, its last words, a child's error."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from structlog.testing import capture_logs

from loopx import process
from loopx.fleet import AgentHeartbeat, AgentPhase, ExitKind, ExitStatus
from loopx.storage.files import atomic_write_model
from loopx.supervisor.backoff import RestartPolicy
from loopx.supervisor.child import last_error, log_end
from loopx.supervisor.exits import last_lines, settle_exit, working_on
from loopx.supervisor.slot import Slot, resize

CRASH = ExitStatus(kind=ExitKind.EXITED, code=1)
CLEAN = ExitStatus(kind=ExitKind.EXITED, code=0)


def test_resize_retires_the_highest_slots_and_fills_the_lowest_free_index() -> None:
    """Down to 1 retires 2 and 3; back up to 3 adds 4 and 5 (2 and 3 still retire), sorted."""
    slots = [Slot(i, f"agent-{i}") for i in (1, 2, 3)]
    retired = resize(slots, 1, now=5.0)
    assert [s.index for s in retired] == [2, 3]
    assert all(s.retiring and s.next_start is None for s in retired)
    assert resize(slots, 3, now=7.0) == []
    assert [(s.index, s.retiring) for s in slots] == [
        (1, False),
        (2, True),
        (3, True),
        (4, False),
        (5, False),
    ]
    assert slots[-1].next_start == 7.0


def test_a_crash_counts_toward_a_crash_loop_and_a_clean_exit_does_not() -> None:
    """Crashes inside the window accumulate to a crash loop; a clean exit restarts at base."""
    policy = RestartPolicy(base_s=1.0, max_s=8.0, window_s=100.0, crash_loop_restarts=3)
    slot = Slot(1, "agent-1")
    for now in (10.0, 11.0, 12.0):
        settle_exit(slot, CRASH, policy, now=now, restart=True)
    assert (slot.restarts, slot.recent_restarts, slot.crash_loop) == (3, 3, True)
    assert slot.next_start == 12.0 + 8.0
    settle_exit(slot, CLEAN, policy, now=13.0, restart=True)
    assert slot.next_start == 13.0 + 1.0
    assert slot.last_exit == CLEAN


def test_the_crash_loop_line_names_the_goal_and_turn_the_agent_was_on(tmp_path: Path) -> None:
    """The agent's heartbeat named a turn: the crash loop's line carries its goal_id, turn_key."""
    slot = Slot(1, "agent-1")
    me = process.ProcessIdentity.current()
    beat = tmp_path / "agent-1.json"
    now = datetime.now(UTC)
    atomic_write_model(beat, AgentHeartbeat(agent_id="agent-1", pid=me.pid,
        pid_started_at=me.started_at, hostname="h", phase=AgentPhase.RUNNING, goal_id="fix-ci",
        turn_key="fix-ci-t000003-e2", started_at=now, beat_at=now))  # fmt: skip
    about = working_on(beat, me)
    assert about == {"goal_id": "fix-ci", "turn_key": "fix-ci-t000003-e2"}
    policy = RestartPolicy(crash_loop_restarts=2)
    with capture_logs() as logs:
        for now_s in (1.0, 2.0):
            settle_exit(slot, CRASH, policy, now=now_s, restart=True, about=about)
    (loop,) = [e for e in logs if e["event"] == "agent_crash_loop"]
    assert (loop["goal_id"], loop["turn_key"]) == ("fix-ci", "fix-ci-t000003-e2")
    # The heartbeat of another process (not the agent that ended) names nothing.
    assert working_on(beat, process.ProcessIdentity(me.pid + 1, me.started_at)) == {}


def test_no_restart_while_stopping() -> None:
    """Without ``restart`` the slot is emptied and not scheduled."""
    slot = Slot(1, "agent-1")
    settle_exit(slot, CRASH, RestartPolicy(), now=1.0, restart=False)
    assert (slot.next_start, slot.restarts, slot.last_exit) == (None, 0, CRASH)


def test_last_lines_are_the_non_blank_tail_of_the_log(tmp_path: Path) -> None:
    """The last non-blank lines; a missing log has none."""
    log = tmp_path / "agent-1.log"
    log.write_text("".join(f"line {i}\n\n" for i in range(40)))
    assert last_lines(log, 3) == ["line 37", "line 38", "line 39"]
    assert last_lines(tmp_path / "missing.log") == []


def test_a_child_s_last_error_is_its_own_last_error_line(tmp_path: Path) -> None:
    """Only what follows ``since`` counts; the CLI's prefix is dropped; else the last line."""
    log = tmp_path / "supervisor.log"
    log.write_text("loopx: error: an earlier run's\n")
    since = log_end(log)
    with log.open("a") as f:
        f.write("starting\nloopx: error: registry damaged\nhint: run loopx doctor\n")
    assert last_error(log, since) == "registry damaged"
    assert last_error(log, log_end(log)) == "(nothing logged)"
    assert last_error(tmp_path / "missing.log") == "(no log)"
    assert log_end(tmp_path / "missing.log") == 0
