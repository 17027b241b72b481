"""The aider adapter: what the shared contract does not pin down.

The recorded transcripts (tests/test_host_contract.py) prove each failure's outcome; here
are its argv, where its session lives, and how it reads tokens, cost and errors from output
aider 0.86.2 prints (its words, copied from tests/realhosts/captures/aider-*.json).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loopx.agents.hosts.aider import (
    RESTORED,
    AiderHost,
    history_file,
    last_error,
    reported_usage,
    session_of_run,
    token_count,
)
from loopx.agents.hosts.base import HostOutput
from loopx.registry.goalrecords import HostKind
from loopx.state import HostSession
from loopx.turn.failures import FailureReason
from loopx.turn.outcome import ResultKind
from tests.hostkit import make_envelope, make_goal

ANSWER = json.dumps({"kind": "progress", "summary": "did it"})
ANNOUNCED = "Aider v0.86.2\nModel: openai/m with whole edit format\nGit repo: .git with 1 files\n"


def _event(name: str, **properties: object) -> str:
    return json.dumps({"event": name, "properties": properties, "user_id": "u", "time": 1})


def _program(tmp_path: Path) -> str:
    path = tmp_path / "bin" / "aider"
    path.parent.mkdir(exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return str(path)


def test_a_fresh_session_is_a_history_file_in_the_goals_directory(tmp_path):
    """No kept session: the history file is named after the turn, under the goal's directory."""
    goal = make_goal(tmp_path, HostKind.AIDER, [_program(tmp_path), "--model", "sonnet"])
    envelope = make_envelope(tmp_path, goal, seq=7)
    argv = AiderHost().prepare(goal, envelope).argv
    history = argv[argv.index("--chat-history-file") + 1]
    assert history == history_file(envelope)
    assert Path(history).parent == Path(envelope.root) / "goals" / goal.id / "aider"
    assert "--no-restore-chat-history" in argv
    assert argv[-2:] == ["--model", "sonnet"]  # the goal's flags last: they win


def test_a_kept_session_is_restored_from_its_file(tmp_path):
    """A kept session's id is its history file: passed as it is, and restored."""
    goal = make_goal(tmp_path, HostKind.AIDER, [_program(tmp_path)])
    kept = HostSession(kind=HostKind.AIDER, session_id=str(tmp_path / "h.chat.md"), turns=2)
    argv = AiderHost().prepare(goal, make_envelope(tmp_path, goal, session=kept)).argv
    assert argv[argv.index("--chat-history-file") + 1] == kept.session_id
    assert "--restore-chat-history" in argv


def test_the_session_continues_only_when_aider_restored_it(tmp_path):
    """Restored: the kept session, one turn more. Not restored: dropped. None kept: the turn's."""
    goal = make_goal(tmp_path, HostKind.AIDER)
    kept = HostSession(kind=HostKind.AIDER, session_id="/r/goals/g/aider/1-1.chat.md", turns=2)
    envelope = make_envelope(tmp_path, goal, session=kept)
    restored = HostOutput(exit_code=0, stdout=f"{ANNOUNCED}{RESTORED}\n\n{ANSWER}\n")
    lost = HostOutput(exit_code=0, stdout=f"{ANNOUNCED}\n{ANSWER}\n")
    again = session_of_run(HostKind.AIDER, kept, envelope, restored)
    assert (again.session_id, again.turns) == (kept.session_id, 3)
    assert session_of_run(HostKind.AIDER, kept, envelope, lost).session_id == ""
    fresh = session_of_run(HostKind.AIDER, None, envelope, lost)
    assert (fresh.session_id, fresh.turns) == (history_file(envelope), 1)


@pytest.mark.parametrize(
    ("printed", "count"),
    [("80", 80), ("1.2k", 1200), ("12k", 12_000), ("1.5M", 1_500_000), ("k", 0)],
)
def test_token_counts_read_as_aider_prints_them(printed, count):
    """aider rounds to one decimal below 10k and to thousands above; M for millions."""
    assert token_count(printed) == count


def test_usage_is_the_analytics_events_sum_else_the_usage_lines():
    """Every model call's exact figures from stderr; the rounded stdout lines only without them."""
    stderr = "\n".join([
        "Warning: Input is not a terminal (fd=0).",
        _event("message_send_starting"),
        _event("message_send", prompt_tokens=1234, completion_tokens=56, cost=0.01),
        _event("message_send", prompt_tokens=2000, completion_tokens=4, cost=0.02),
    ])  # fmt: skip
    stdout = (
        "Tokens: 1.2k sent, 56 received. Cost: $0.01 message, $0.01 session.\n"
        "Tokens: 2.0k sent, 1.0k cache write, 500 cache hit, 4 received.\n"
    )
    exact = reported_usage(HostOutput(exit_code=0, stdout=stdout, stderr=stderr))
    assert (exact.input_tokens, exact.output_tokens, exact.calls) == (3234, 60, 2)
    assert exact.cost_usd == pytest.approx(0.03)
    rounded = reported_usage(HostOutput(exit_code=0, stdout=stdout))
    assert (rounded.input_tokens, rounded.output_tokens, rounded.calls) == (3200, 60, 2)
    assert rounded.cost_usd == pytest.approx(0.01)


def test_the_last_error_is_litellms_line_and_aiders_advice():
    """Retries print the error again and again; the last one is read, without the delay line."""
    error = (
        "litellm.RateLimitError: RateLimitError: OpenAIException - mock rate limit\n"
        "The API provider has rate limited you. Try again later or check your quotas.\n"
    )
    stdout = f"{ANNOUNCED}\n{error}Retrying in 0.2 seconds...\n{error}\n"
    assert last_error(stdout) == error.strip()
    assert last_error(f"{ANNOUNCED}\n{ANSWER}\n") is None


def test_an_error_after_a_model_call_leaves_the_answer_standing(tmp_path):
    """A failed follow-up call (a reflection) does not undo the answer aider already applied."""
    goal = make_goal(tmp_path, HostKind.AIDER)
    stdout = (
        f"{ANNOUNCED}\n{ANSWER}\n\nTokens: 80 sent, 8 received.\n\n"
        "litellm.InternalServerError: InternalServerError: OpenAIException - boom\n"
    )
    seen = AiderHost().interpret(
        make_envelope(tmp_path, goal),
        HostOutput(exit_code=0, stdout=stdout, stderr=_event("message_send", prompt_tokens=80)),
    )
    assert seen.result is not None
    assert (seen.result.kind, seen.input_tokens) == (ResultKind.PROGRESS, 80)


def test_a_stopped_run_is_read_by_the_error_it_printed(tmp_path):
    """The stall watch stops aider while it retries: the retried error, not the signal, decides."""
    goal = make_goal(tmp_path, HostKind.AIDER)
    stdout = (
        f"{ANNOUNCED}\nlitellm.InternalServerError: InternalServerError: OpenAIException - "
        "Connection error.\nThe API provider's servers are down or overloaded.\n"
        "Retrying in 0.5 seconds...\n"
    )
    seen = AiderHost().interpret(
        make_envelope(tmp_path, goal), HostOutput(exit_code=None, signal=15, stdout=stdout)
    )
    assert seen.result is not None
    assert seen.result.evidence == [FailureReason.HOST_UNREACHABLE.value]


def test_a_run_without_a_model_call_or_error_is_no_result(tmp_path):
    """aider printed its announcements only: not a result, and it says what it saw."""
    goal = make_goal(tmp_path, HostKind.AIDER)
    seen = AiderHost().interpret(
        make_envelope(tmp_path, goal), HostOutput(exit_code=0, stdout=ANNOUNCED)
    )
    assert seen.failure is not None
    assert seen.failure.reason == FailureReason.NO_RESULT
