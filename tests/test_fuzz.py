"""Fuzzing the inputs LoopX reads: random JSON and near-valid mutations never crash it.

Every registry, state, journal, envelope and host result is parsed through the
same entry points the code uses; a rejection must be a typed error
(:class:`~loopx.errors.LoopxError`, or a typed journal violation / turn
failure), never an unhandled exception.
"""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loopx.agents.hosts import host_for
from loopx.agents.hosts.base import HostOutput
from loopx.errors import CorruptFileError, InvalidGoalIdError, LoopxError
from loopx.ids import validate_goal_id
from loopx.registry.goalrecords import Goal, HostKind, HostSpec, Registry
from loopx.state import Gate, GoalState, Todo
from loopx.storage.files import parse_model
from loopx.turn.failures import FailureReason
from loopx.turn.inspection import RecoveryDecision, inspect
from loopx.turn.journal import TurnJournal, TurnPlan, make_turn_key
from loopx.turn.protocol import Envelope

FUZZ = settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
NOW = datetime(2026, 1, 1, tzinfo=UTC)
WHERE = Path("/nonexistent/fuzz.json")

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=30),
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=12), children, max_size=5)
    ),
    max_leaves=25,
)


# --- valid documents to mutate -----------------------------------------------------------------


def _state() -> GoalState:
    return GoalState(
        goal_id="g",
        beliefs=["b"],
        todos=[Todo(id="t", text="x")],
        gates=[Gate(id=1, question="q?", opened_at=NOW)],
        turn_seq=2,
        updated_at=NOW,
    )


def _goal() -> Goal:
    return Goal(
        id="g",
        objective="o",
        workdir="/tmp",
        host=HostSpec(kind=HostKind.DEMO),
        created_at=NOW,
        updated_at=NOW,
    )


def _envelope() -> Envelope:
    return Envelope(
        goal_id="g",
        turn_key=make_turn_key("g", 3, 2),
        seq=3,
        epoch=2,
        objective="o",
        workdir="/tmp",
        root="/r",
        result_file="/r/x.json",
        turn_timeout_s=10.0,
        deadline_at=NOW + timedelta(seconds=10),
        state=_state(),
    )


def _journal() -> TurnJournal:
    envelope = _envelope()
    plan = TurnPlan(envelope=envelope, host_kind=HostKind.DEMO, argv=[], turn_timeout_s=10.0)
    return TurnJournal(
        loopx_version="0",
        goal_id="g",
        agent_id="a",
        turn_key=envelope.turn_key,
        seq=3,
        epoch=2,
        plan=plan,
        created_at=NOW,
        updated_at=NOW,
    )


VALID = {
    "registry": Registry(goals={"g": _goal()}).model_dump(mode="json"),
    "state": _state().model_dump(mode="json"),
    "journal": _journal().model_dump(mode="json"),
    "envelope": _envelope().model_dump(mode="json"),
    "result": {
        "schema_version": 1,
        "kind": "progress",
        "summary": "s",
        "evidence": ["e"],
        "state_patch": {"beliefs": ["b"], "todos": [{"id": "t", "text": "x"}]},
        "turn_key": "g-t000003-e2",
        "goal_id": "g",
    },
}


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(doc, dict):
        for key, value in doc.items():
            out += _paths(value, (*prefix, key))
    elif isinstance(doc, list):
        for index, value in enumerate(doc):
            out += _paths(value, (*prefix, index))
    return out


@st.composite
def near_valid(draw: st.DrawFn, kind: str) -> bytes:
    """A valid document of ``kind`` with one to three random mutations, as JSON bytes."""
    doc = copy.deepcopy(VALID[kind])
    for _ in range(draw(st.integers(1, 3))):
        paths = [p for p in _paths(doc) if p]
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent = doc
        for step in path[:-1]:
            parent = parent[step]
        action = draw(st.sampled_from(["delete", "replace", "add", "type"]))
        last = path[-1]
        if action == "delete":
            del parent[last]
        elif action == "replace":
            parent[last] = draw(json_values)
        elif action == "type":
            parent[last] = json.dumps(parent[last])  # right value, wrong type
        elif isinstance(parent, dict):
            parent[draw(st.text(max_size=10))] = draw(json_values)
    return json.dumps(doc).encode()


def raw_bytes() -> st.SearchStrategy[bytes]:
    return st.binary(max_size=300) | json_values.map(lambda v: json.dumps(v).encode())


def truncated(kind: str) -> st.SearchStrategy[bytes]:
    data = json.dumps(VALID[kind]).encode()
    return st.integers(0, len(data) - 1).map(lambda n: data[:n])


def inputs(kind: str) -> st.SearchStrategy[bytes]:
    return near_valid(kind) | raw_bytes() | truncated(kind)


# --- the properties ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "model", [Registry, GoalState, Envelope, TurnJournal], ids=lambda m: m.__name__
)
def test_valid_documents_parse(model: Any) -> None:
    """The seeds of the mutations are valid, so a rejection below is the mutation's doing."""
    name = {
        "Registry": "registry",
        "GoalState": "state",
        "Envelope": "envelope",
        "TurnJournal": "journal",
    }[model.__name__]
    parse_model(WHERE, model, json.dumps(VALID[name]).encode())


@pytest.mark.parametrize(
    ("kind", "model"),
    [
        ("registry", Registry),
        ("state", GoalState),
        ("envelope", Envelope),
        ("journal", TurnJournal),
    ],
)
def test_file_parsing_rejects_with_corrupt_file_error(kind: str, model: Any) -> None:
    """Parsing a damaged registry/state/envelope/journal either succeeds or raises CorruptFileError."""

    @FUZZ
    @given(data=inputs(kind))
    def check(data: bytes) -> None:
        try:
            parse_model(WHERE, model, data)
        except CorruptFileError as e:
            assert str(WHERE) in e.message and e.problem

    check()


@FUZZ
@given(data=inputs("journal"))
def test_inspect_never_raises_and_types_every_violation(data: bytes) -> None:
    """inspect() returns a projection for any bytes; an unusable journal is a typed quarantine."""
    view = inspect(data, goal_id="g", turn_key="g-t000003-e2")
    if view.recovery_decision is RecoveryDecision.QUARANTINE:
        assert view.violations and all(v.code and v.message for v in view.violations)
    else:
        TurnJournal.model_validate_json(data)  # anything else inspect accepts really parses


def _envelope_model() -> Envelope:
    return _envelope()


@pytest.mark.parametrize("kind", [HostKind.COMMAND, HostKind.DEMO, HostKind.CODEX, HostKind.CLAUDE])
def test_host_results_are_read_into_a_result_or_a_typed_failure(kind: HostKind) -> None:
    """Any stdout / result file a host leaves becomes a result or a typed failure, never a crash."""
    host = host_for(kind)
    envelope = _envelope_model()
    text = st.one_of(
        near_valid("result").map(bytes.decode),
        st.text(max_size=200),
        json_values.map(json.dumps),
    )

    @FUZZ
    @given(stdout=text, result_file=st.none() | text, exit_code=st.sampled_from([0, 0, 1, None]))
    def check(stdout: str, result_file: str | None, exit_code: int | None) -> None:
        output = HostOutput(
            exit_code=exit_code,
            signal=None if exit_code is not None else 9,
            stdout=stdout,
            result_file_text=result_file,
        )
        try:
            reading = host.interpret(envelope, output)
        except LoopxError:
            return  # typed; the turn records it as malformed_output
        assert (reading.result is None) != (reading.failure is None)
        if reading.failure is not None:
            assert isinstance(reading.failure.reason, FailureReason) and reading.failure.message

    check()


@FUZZ
@given(goal_id=st.text(max_size=80))
def test_goal_ids_are_accepted_or_rejected_with_a_typed_error(goal_id: str) -> None:
    """Any string is a valid id (a single safe path segment) or an InvalidGoalIdError."""
    try:
        validate_goal_id(goal_id)
    except InvalidGoalIdError as e:
        assert e.exit_code == 2
    else:
        assert "/" not in goal_id and goal_id not in {".", ".."} and not goal_id.startswith(".")


def test_fuzzed_state_on_disk_gives_a_clean_cli_error(tmp_path: Path) -> None:
    """A damaged state.json read by the real CLI is one error line with a hint, exit 1."""
    from tests.turnkit import demo_goal, loopx, make_root

    layout = make_root(tmp_path / "root")
    demo_goal(layout, "g", tmp_path / "wd")
    layout.state_file("g").write_bytes(b'{"schema_version": 1, "goal_id": 7}')
    done = loopx(layout.root, "goal", "show", "g")
    assert done.returncode == 1
    assert done.stderr.startswith("loopx: error: ") and "hint: " in done.stderr
    assert "Traceback" not in done.stderr


def test_history_and_ledger_lines_are_read_or_rejected_with_corrupt_file_error(
    tmp_path: Path,
) -> None:
    """Random bytes in history.jsonl / quota.jsonl give records or a CorruptFileError."""
    from loopx.quota.ledger import SpendRecord
    from loopx.storage.jsonl import read_records
    from loopx.turn.historyline import HistoryLine

    path = tmp_path / "lines.jsonl"
    line = st.one_of(json_values.map(json.dumps), st.text(max_size=40))

    @FUZZ
    @given(lines=st.lists(line, max_size=6), torn=st.booleans())
    def check(lines: list[str], torn: bool) -> None:
        path.write_text("\n".join(lines) + ("" if torn else "\n"))
        for model in (HistoryLine, SpendRecord):
            try:
                read_records(path, model)
            except CorruptFileError as e:
                assert e.problem.startswith("line ")

    check()
