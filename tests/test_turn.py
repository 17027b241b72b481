"""One whole turn through `loopx turn run-once`: results, failures and scheduler effects."""

from __future__ import annotations

import json
import threading

from loopx.agents.turn import TurnConfig, attempt_turn, run_one_turn
from loopx.registry.goalrecords import HostKind
from loopx.state import load_state
from loopx.turn.journal import PHASES
from loopx.turn.outcome import TurnStatus
from tests.turnkit import demo_goal, demo_runs, loopx, make_root

FAST = TurnConfig(lease_ttl_s=5, lease_grace_s=1, kill_grace_s=0.3)


def test_demo_goal_completes_after_three_turns(tmp_path):
    """Three turns advance the counter to 3, mark the goal done; a fourth is refused."""
    layout = make_root(tmp_path / "root")
    demo_goal(layout, "g", tmp_path / "wd")
    kinds = [run_one_turn(layout, "g", agent_id="a", config=FAST) for _ in range(3)]
    assert [r.kind for r in kinds if r] == ["progress", "progress", "completed"]
    assert json.loads(layout.goal_file("g").read_text())["status"] == "done"
    assert run_one_turn(layout, "g", agent_id="a", config=FAST) is None
    assert load_state(layout, "g").turn_seq == 3


def test_run_once_cli_json_prints_the_attempt(tmp_path):
    """`loopx turn run-once --json` prints the attempt with the turn report."""
    layout = make_root(tmp_path / "root")
    demo_goal(layout, "g", tmp_path / "wd")
    out = loopx(layout.root, "turn", "run-once", "g", "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["report"]["status"] == "committed"
    assert doc["report"]["turn_key"] == "g-t000001-e1"


def test_failing_host_fails_the_turn_and_backs_off(tmp_path):
    """A host exiting non-zero ends failed (host_exit) with a next eligible time."""
    layout = make_root(tmp_path / "root")
    demo_goal(layout, "g", tmp_path / "wd", "--fail")
    report = run_one_turn(layout, "g", agent_id="a", config=FAST)
    assert report is not None and report.status is TurnStatus.FAILED
    assert report.failure is not None and report.failure.reason == "host_exit"
    state = load_state(layout, "g")
    assert state.consecutive_failures == 1 and state.next_eligible_at is not None


def test_needs_human_opens_a_gate(tmp_path):
    """A needs_human result opens a gate opened_by the turn key."""
    layout = make_root(tmp_path / "root")
    demo_goal(layout, "g", tmp_path / "wd", "--kind", "needs_human", "--question", "ok?")
    report = run_one_turn(layout, "g", agent_id="a", config=FAST)
    assert report is not None
    gates = load_state(layout, "g").open_gates
    assert [(g.question, g.opened_by) for g in gates] == [("ok?", report.turn_key)]


def test_wait_result_sets_next_eligible(tmp_path):
    """A wait result makes the goal ineligible for wait_seconds after the host ended."""
    layout = make_root(tmp_path / "root")
    demo_goal(layout, "g", tmp_path / "wd", "--kind", "wait", "--wait-seconds", "600")
    assert run_one_turn(layout, "g", agent_id="a", config=FAST) is not None
    attempt = attempt_turn(layout, "g", agent_id="a", config=FAST)
    assert attempt.report is None and attempt.quota is not None
    assert attempt.quota.reason == "not_yet_eligible"


def test_invalid_and_missing_results_are_typed_failures(tmp_path):
    """Invalid JSON, no result and an oversized field each give their failure reason."""
    layout = make_root(tmp_path / "root")
    reasons = {}
    for n, switch in enumerate(["--invalid-json", "--no-result", "--oversized"]):
        demo_goal(layout, f"g{n}", tmp_path / f"wd{n}", switch)
        report = run_one_turn(layout, f"g{n}", agent_id="a", config=FAST)
        assert report is not None
        reasons[switch] = report.failure.reason if report.failure else None
    assert reasons == {
        "--invalid-json": "invalid_result",
        "--no-result": "no_result",
        "--oversized": "invalid_result",
    }


def test_missing_command_host_is_host_missing(tmp_path):
    """A command host whose program does not exist fails with host_missing."""
    layout = make_root(tmp_path / "root")
    demo_goal(layout, "g", tmp_path / "wd", "no-such-program-xyz", kind=HostKind.COMMAND)
    report = run_one_turn(layout, "g", agent_id="a", config=FAST)
    assert report is not None and report.failure is not None
    assert report.failure.reason == "host_missing"


def test_timeout_fails_the_turn(tmp_path):
    """A host past turn_timeout_s is killed and the turn fails turn_timeout."""
    layout = make_root(tmp_path / "root")
    demo_goal(layout, "g", tmp_path / "wd", "--hang", "60", turn_timeout_s=1.0)
    report = run_one_turn(layout, "g", agent_id="a", config=FAST)
    assert report is not None and report.failure is not None
    assert report.failure.reason == "turn_timeout"


def test_stop_while_host_runs_ends_stopped(tmp_path):
    """Setting stop while the host runs ends the journal stopped, with its phases done."""
    layout = make_root(tmp_path / "root")
    wd = tmp_path / "wd"
    demo_goal(layout, "g", wd, "--hang", "60")
    stop = threading.Event()
    result = []
    worker = threading.Thread(
        target=lambda: result.append(
            run_one_turn(layout, "g", agent_id="a", stop=stop, config=FAST)
        )
    )
    worker.start()
    try:
        import time

        deadline = time.monotonic() + 30
        while not demo_runs(wd):
            assert time.monotonic() < deadline
            time.sleep(0.02)
    finally:
        stop.set()
        worker.join(timeout=30)
    report = result[0]
    assert report is not None and report.status is TurnStatus.STOPPED
    assert len(report.completed_phases) == len(
        PHASES
    )  # every phase, done_check (no check) included
