"""The contract every CLI host adapter passes, replayed from what the real CLIs printed.

Each ``tests/realhosts/captures/<kind>-<mode>.json`` is one run of the pinned CLI
against the mock model in ``mode`` (``python -m tests.realhosts.capture``).
Every kind installed in the ``loopx.hosts`` group, built-in or plug-in, is held
to the same clauses: it starts with the envelope, honours the workdir, reads one
typed result, resumes its session, reports tokens, maps each failure to its
typed outcome, and a missing program is ``HostMissingError``. The live half of
the contract (the CLIs themselves, processes left behind) is
``tests/realhosts/test_contract_real.py``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from loopx.agents.hosts import host_for
from loopx.agents.hosts.base import Host, HostOutput, Interpretation
from loopx.agents.hosts.plugins import installed
from loopx.agents.hosts.session import no_session
from loopx.errors import HostMissingError
from loopx.registry.goalrecords import HostKind
from loopx.state import HostSession
from loopx.turn.failures import FailureReason
from loopx.turn.outcome import ResultKind
from tests.hostkit import make_envelope, make_goal

CAPTURES = Path(__file__).parent / "realhosts" / "captures"
# Kinds that speak LoopX's own protocol (docs/host-protocol.md) rather than wrap a CLI.
PROTOCOL_KINDS = frozenset({HostKind.COMMAND.value, HostKind.DEMO.value})
CLI_KINDS = sorted(set(installed()) - PROTOCOL_KINDS)
# What each mock mode must come to: ("result", kind, evidence[0]) or ("failure", reason).
EXPECTED: dict[str, tuple[str, ...]] = {
    "ok": ("result", ResultKind.PROGRESS, ""),
    "tool": ("result", ResultKind.PROGRESS, ""),
    "usage_limit": ("result", ResultKind.WAIT, FailureReason.HOST_RATE_LIMITED),
    "weekly_limit": ("result", ResultKind.WAIT, FailureReason.HOST_RATE_LIMITED),
    "429": ("result", ResultKind.WAIT, FailureReason.HOST_RATE_LIMITED),
    "500": ("result", ResultKind.WAIT, FailureReason.HOST_SERVER_ERROR),
    "unreachable": ("result", ResultKind.WAIT, FailureReason.HOST_UNREACHABLE),
    "401": ("failure", FailureReason.HOST_AUTH),
    "lost_session": ("failure", FailureReason.HOST_EXECUTION_ERROR),
}
# Where a kind's outcome differs, and why. aider keeps no session of its own: a chat history
# file that is gone is not restored and the run goes on without it, so the turn's work is kept
# (the session is still dropped, below).
EXPECTED_OF_KIND: dict[tuple[str, str], tuple[str, ...]] = {
    ("aider", "lost_session"): ("result", ResultKind.PROGRESS, ""),
}


def _transcripts() -> list[tuple[str, str]]:
    found = []
    for path in sorted(CAPTURES.glob("*.json")):
        kind, _, mode = path.stem.partition("-")
        if mode in EXPECTED:
            found.append((kind, mode))
    return found


def transcript(kind: str, mode: str) -> dict[str, Any]:
    record: dict[str, Any] = json.loads((CAPTURES / f"{kind}-{mode}.json").read_text())
    return record


def replay(
    tmp_path: Path, kind: str, mode: str, session: HostSession | None = None
) -> Interpretation:
    """Interpret the recorded output of ``kind`` in ``mode`` as the turn runner would."""
    host = host_for(kind)
    record = transcript(kind, mode)
    goal = make_goal(tmp_path, kind)
    envelope = make_envelope(tmp_path, goal, session=session)
    output = HostOutput(
        exit_code=record["exit_code"], stdout=record["stdout"], stderr=record["stderr"]
    )
    first = host.interpret(envelope, output)
    assert host.interpret(envelope, output) == first  # pure: recovery may read it again
    return first


@pytest.fixture
def program(tmp_path: Path) -> Path:
    """A stand-in executable for the adapter to find (prepare never runs it)."""
    path = tmp_path / "bin" / "the-cli"
    path.parent.mkdir()
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(0o755)
    return path


def _prepared(tmp_path: Path, kind: str, program: Path, session: HostSession | None = None) -> Any:
    host: Host = host_for(kind)
    goal = make_goal(tmp_path, kind, [str(program)])
    envelope = make_envelope(tmp_path, goal, session=session)
    return envelope, host.prepare(goal, envelope)


def test_every_cli_kind_has_transcripts():
    """Adding a CLI host means adding its transcripts: at least a successful run and a lost session."""
    for kind in CLI_KINDS:
        modes = {mode for k, mode in _transcripts() if k == kind}
        assert {"ok", "lost_session"} <= modes, f"{kind}: run python -m tests.realhosts.capture"


@pytest.mark.parametrize("kind", CLI_KINDS)
def test_starts_with_the_envelope(tmp_path, program, kind):
    """The prompt carries the goal's state: objective, next action, beliefs, the turn key."""
    envelope, invocation = _prepared(tmp_path, kind, program)
    prompt = invocation.stdin.decode() + " ".join(invocation.argv)
    assert invocation.argv[0] == str(program)
    for text in (envelope.objective, "run pytest -x", "the parser is fine", envelope.turn_key):
        assert text in prompt, (kind, text)


@pytest.mark.parametrize("kind", CLI_KINDS)
def test_honours_the_workdir(tmp_path, program, kind):
    """The agent is told its workdir, and no other directory is passed as its working place."""
    envelope, invocation = _prepared(tmp_path, kind, program)
    assert envelope.workdir in invocation.stdin.decode()
    for flag in ("--cd", "-C", "--dir"):
        if flag in invocation.argv:
            assert invocation.argv[invocation.argv.index(flag) + 1] == envelope.workdir
    assert invocation.env.get("PWD", envelope.workdir) == envelope.workdir


@pytest.mark.parametrize("kind", CLI_KINDS)
def test_resumes_its_session_and_not_another_kinds(tmp_path, program, kind):
    """A kept session of this kind is resumed by id; one of another kind is not."""
    own = HostSession(kind=kind, session_id="sess-own-1", turns=2)
    other = HostSession(kind="command" if kind != "command" else "demo", session_id="sess-other")
    _, resumed = _prepared(tmp_path, kind, program, own)
    _, fresh = _prepared(tmp_path, kind, program, other)
    assert "sess-own-1" in resumed.argv
    assert "sess-other" not in fresh.argv


@pytest.mark.parametrize("kind", CLI_KINDS)
def test_a_missing_program_is_host_missing(tmp_path, kind):
    """A program that is not there is HostMissingError at prepare, never a spawn that fails."""
    goal = make_goal(tmp_path, kind, [str(tmp_path / "no-such-cli")])
    with pytest.raises(HostMissingError):
        host_for(kind).prepare(goal, make_envelope(tmp_path, goal))


@pytest.mark.parametrize("kind", CLI_KINDS)
def test_writes_one_typed_result_with_its_session_and_tokens(tmp_path, kind):
    """The recorded ok run is one progress result, a session to resume, and the tokens used."""
    seen = replay(tmp_path, kind, "ok")
    assert seen.failure is None
    assert seen.result is not None
    assert (seen.result.kind, seen.result.summary) == (ResultKind.PROGRESS, "mock model turn")
    assert seen.session is not None
    assert seen.session.kind == kind
    assert seen.session.session_id
    assert (seen.input_tokens > 0, seen.output_tokens > 0) == (True, True)


@pytest.mark.parametrize("kind", CLI_KINDS)
def test_a_resumed_session_counts_its_turns(tmp_path, kind):
    """Interpreting a run of the kept session adds one to its turns."""
    first = replay(tmp_path, kind, "ok")
    assert first.session is not None
    kept = first.session.model_copy(update={"turns": 3})
    (tmp_path / "again").mkdir()
    again = replay(tmp_path / "again", kind, "ok", session=kept)
    assert again.session is not None
    assert (again.session.session_id, again.session.turns) == (kept.session_id, 4)


@pytest.mark.parametrize(("kind", "mode"), _transcripts())
def test_maps_each_recorded_outcome(tmp_path, kind, mode):
    """Each recorded run is exactly one outcome: the result or typed failure its mode calls for."""
    expected = EXPECTED_OF_KIND.get((kind, mode), EXPECTED[mode])
    seen = replay(tmp_path, kind, mode)
    assert (seen.result is None) != (seen.failure is None)
    if expected[0] == "failure":
        assert seen.failure is not None, seen
        assert seen.failure.reason == expected[1], seen.failure
    else:
        assert seen.result is not None, seen
        assert seen.result.kind == expected[1], seen.result
        assert seen.result.evidence[:1] == ([expected[2]] if expected[2] else []), seen.result


@pytest.mark.parametrize("kind", CLI_KINDS)
def test_a_lost_session_is_dropped(tmp_path, kind):
    """A session the CLI cannot find is replaced by an empty one: the next turn starts fresh."""
    kept = HostSession(kind=kind, session_id="4f0a5c8e-0000-4000-8000-000000000000", turns=2)
    seen = replay(tmp_path, kind, "lost_session", session=kept)
    assert seen.session == no_session(kind)


def test_transcripts_hold_no_path_of_this_checkout():
    """Transcripts are portable: the temp dir, the port and the checkout are placeholders."""
    for path in CAPTURES.glob("*.json"):
        assert str(Path(__file__).parents[1]) not in path.read_text(), path.name
