"""Journals and inspect(): keys, phase order, and typed violations for bad input."""

from __future__ import annotations

import json

import pytest

from loopx.turn.inspection import RecoveryDecision, ViolationCode, decision_reason, inspect
from loopx.turn.journal import PHASES, make_turn_key, parse_turn_key
from tests.turnkit import demo_goal, loopx, make_root


@pytest.fixture(scope="module")
def committed(tmp_path_factory) -> dict:
    """A real committed journal document (one demo turn)."""
    base = tmp_path_factory.mktemp("journal")
    layout = make_root(base / "root")
    demo_goal(layout, "g", base / "wd")
    assert loopx(layout.root, "turn", "run-once", "g").returncode == 0
    return json.loads(next(layout.turns_dir("g").glob("*.json")).read_text())


def _view(doc: dict | bytes, key: str = "g-t000001-e1", goal: str = "g"):
    raw = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
    return inspect(raw, goal_id=goal, turn_key=key)


def test_turn_key_is_deterministic_and_parses_back():
    """The same (goal, seq, epoch) always gives the same key, and it parses back."""
    key = make_turn_key("a.b-c", 12, 3)
    assert key == make_turn_key("a.b-c", 12, 3) == "a.b-c-t000012-e3"
    assert parse_turn_key(key) == ("a.b-c", 12, 3)
    assert parse_turn_key("nonsense") is None


def test_committed_journal_is_legal_and_consistent(committed):
    """A committed journal: all phases, consistent, decision none."""
    view = _view(committed)
    assert (view.replay_legal, view.journal_consistent) == (True, True)
    assert view.completed_phases == list(PHASES)
    assert view.recovery_decision is RecoveryDecision.NONE


def test_truncated_journal_is_a_not_json_violation(committed):
    """A journal cut in half is quarantined as not_json."""
    raw = json.dumps(committed).encode()
    view = _view(raw[: len(raw) // 2])
    assert [v.code for v in view.violations] == [ViolationCode.NOT_JSON]
    assert view.recovery_decision is RecoveryDecision.QUARANTINE


def test_unknown_schema_version_is_reported_by_name(committed):
    """A journal of an unknown schema names its version and writer."""
    view = _view({**committed, "schema_version": 7, "loopx_version": "9.9"})
    assert view.violations[0].code is ViolationCode.UNSUPPORTED_VERSION
    assert "9.9" in view.violations[0].message and "7" in view.violations[0].message


@pytest.mark.parametrize("version", [[1], {"v": 1}, True, 1.0, "1", None])
def test_a_schema_version_of_the_wrong_type_is_a_violation_not_a_crash(committed, version):
    """A list (unhashable), a bool equal to 1 or a float is an unsupported version."""
    view = _view({**committed, "schema_version": version})
    assert [v.code for v in view.violations] == [ViolationCode.UNSUPPORTED_VERSION]
    assert view.recovery_decision is RecoveryDecision.QUARANTINE


def test_phases_out_of_order_is_a_violation(committed):
    """Completed phases that skip one are not an ordered prefix."""
    phases = [p.value for p in PHASES]
    view = _view({**committed, "completed_phases": [phases[0], phases[2]], "status": "in_progress"})
    assert view.violations[0].code is ViolationCode.PHASE_ORDER


def test_mismatched_goal_and_turn_key(committed):
    """A journal filed under another goal or key is an identity violation."""
    codes = {v.code for v in _view(committed, key="g-t000002-e1", goal="other").violations}
    assert codes == {ViolationCode.GOAL_MISMATCH, ViolationCode.TURN_KEY_MISMATCH}


def test_unknown_status_is_a_schema_violation(committed):
    """An unknown status is a schema violation, not an exception."""
    view = _view({**committed, "status": "exploded"})
    assert view.violations[0].code is ViolationCode.SCHEMA


def test_terminal_without_all_phases_is_inconsistent(committed):
    """Committed with phases missing is status_inconsistent."""
    view = _view({**committed, "completed_phases": ["host_execute"]})
    assert view.violations[0].code is ViolationCode.STATUS_INCONSISTENT


@pytest.mark.parametrize(
    ("phases", "attempt", "decision"),
    [
        ([], 1, RecoveryDecision.RETRY_HOST),
        ([], 2, RecoveryDecision.FAIL),
        (["host_execute", "typed_result", "validation"], 1, RecoveryDecision.RESUME),
    ],
)
def test_in_progress_decisions(committed, phases, attempt, decision):
    """In-progress journals: retry_host, fail when attempts ran out, resume after the host."""
    doc = {**committed, "status": "in_progress", "completed_phases": phases, "attempt": attempt}
    if not phases:
        doc["outcome"] = None
    assert _view(doc).recovery_decision is decision


@pytest.mark.parametrize(
    ("case", "decision", "says"),
    [
        (("committed", None, 1), RecoveryDecision.NONE, "tombstone"),
        (("in_progress", [], 1), RecoveryDecision.RETRY_HOST, "runs it again"),
        (("in_progress", [], 2), RecoveryDecision.FAIL, "interrupted at every attempt"),
        (("in_progress", ["host_execute", "typed_result", "validation"], 1),
         RecoveryDecision.RESUME, "resumed from done_check"),
    ],
)  # fmt: skip
def test_every_decision_carries_its_reason(committed, case, decision, says):
    """Pure: the reason recovery gives for a decision is never empty (a `fail` says why)."""
    status, phases, attempt = case
    doc = {**committed, "status": status, "attempt": attempt}
    if phases is not None:
        doc["completed_phases"] = phases
    if not phases and status == "in_progress":
        doc["outcome"] = None
    view = _view(doc)
    assert view.recovery_decision is decision
    assert says in decision_reason(view)


def test_recover_says_why_it_failed_a_turn_whose_host_runs_were_all_interrupted(tmp_path):
    """`loopx recover --json`: the `fail` action's detail names the interrupted attempts."""
    layout = make_root(tmp_path / "root")
    demo_goal(layout, "g", tmp_path / "wd")
    assert loopx(layout.root, "turn", "run-once", "g", LOOPX_FAULT="before:host").returncode == 137
    (path,) = layout.turns_dir("g").glob("*.json")
    doc = json.loads(path.read_text())
    path.write_text(json.dumps({**doc, "attempt": doc["plan"]["max_host_attempts"]}))
    done = loopx(layout.root, "recover", "--json")
    assert done.returncode == 0, done.stderr
    (action,) = json.loads(done.stdout)["actions"]
    assert action["decision"] == "fail"
    assert "interrupted at every attempt" in action["detail"]
