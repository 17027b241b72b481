"""The claude host adapter against the fake `claude` CLI (loopx.testing.fake_claude) on PATH."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from loopx.agents.hosts.base import HostOutput
from loopx.agents.hosts.claude import ClaudeHost, find_result_object, reported_usage
from loopx.errors import HostMissingError
from loopx.model import utcnow
from loopx.registry.goalrecords import HostKind
from loopx.state import HostSession
from loopx.turn.failures import RESET_UNKNOWN, FailureReason
from loopx.turn.outcome import ResultKind
from tests.hostkit import (
    interpret_turn,
    log_lines,
    make_envelope,
    make_goal,
    run,
    use_fake_cli,
    waits_until_the_printed_minute,
)

HOST = ClaudeHost()


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The fake claude first on PATH; returns its invocation log."""
    return use_fake_cli(tmp_path, monkeypatch, "claude")


def turn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str, session: HostSession | None = None
):
    return interpret_turn(tmp_path, monkeypatch, HOST, mode, session)


# --- prepare ------------------------------------------------------------------------------------


def test_prepare_runs_print_mode_json_with_prompt_on_stdin(tmp_path, fake):
    """A fresh turn is `claude -p --output-format stream-json --verbose`, prompt on stdin."""
    goal = make_goal(tmp_path, HostKind.CLAUDE, ["--max-turns", "30"])
    inv = HOST.prepare(goal, make_envelope(tmp_path, goal))
    assert inv.argv == [
        str(tmp_path / "bin" / "claude"),
        "-p",
        "--output-format",
        "stream-json",
        "--verbose",
        "--max-turns",
        "30",
    ]
    prompt = inv.stdin.decode()
    assert "make the tests pass" in prompt
    assert '"needs_human"' in prompt


def test_prepare_resumes_the_goal_session(tmp_path, fake):
    """A kept claude session becomes --resume <session_id>."""
    goal = make_goal(tmp_path, HostKind.CLAUDE)
    session = HostSession(kind="claude", session_id="s-1", turns=4)
    argv = HOST.prepare(goal, make_envelope(tmp_path, goal, session=session)).argv
    assert argv[argv.index("--resume") + 1] == "s-1"


def test_prepare_starts_fresh_after_session_max_turns(tmp_path, fake):
    """A session that reached session_max_turns is not resumed."""
    goal = make_goal(tmp_path, HostKind.CLAUDE, session_max_turns=2)
    session = HostSession(kind="claude", session_id="s-1", turns=2)
    assert "--resume" not in HOST.prepare(goal, make_envelope(tmp_path, goal, session=session)).argv


def test_prepare_without_claude_on_path_raises_host_missing(tmp_path, monkeypatch):
    """No claude on PATH is HostMissingError naming the program."""
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    goal = make_goal(tmp_path, HostKind.CLAUDE)
    with pytest.raises(HostMissingError) as info:
        HOST.prepare(goal, make_envelope(tmp_path, goal))
    assert info.value.program == "claude"


# --- interpret, through the real fake process ---------------------------------------------------


def test_success_gives_the_result_usage_cost_and_session(tmp_path, monkeypatch, fake):
    """A successful run yields its result, tokens (cache included), cost and session id."""
    _, out = turn(tmp_path, monkeypatch, "success")
    assert out.failure is None
    assert out.result is not None
    assert out.result.kind is ResultKind.PROGRESS
    assert (out.input_tokens, out.output_tokens, out.cost_usd) == (1510, 200, 0.0123)
    assert out.session is not None
    assert (out.session.kind, out.session.turns) == ("claude", 1)
    assert log_lines(fake)[0]["cwd"] == str(tmp_path / "work")


def test_result_wrapped_in_prose_and_a_fence_is_found(tmp_path, monkeypatch, fake):
    """A final message with prose around a ```json fence still yields the result."""
    _, out = turn(tmp_path, monkeypatch, "prose")
    assert out.result is not None
    assert out.result.summary == "fake claude turn"


def test_session_resumes_across_two_turns(tmp_path, monkeypatch, fake):
    """Turn 2 passes --resume with turn 1's session id and counts a second turn."""
    monkeypatch.setenv("FAKE_CLAUDE_MODE", "success")
    goal = make_goal(tmp_path, HostKind.CLAUDE)
    first_env = make_envelope(tmp_path, goal, seq=1)
    first = HOST.interpret(first_env, run(HOST.prepare(goal, first_env), first_env))
    assert first.session is not None
    second_env = make_envelope(tmp_path, goal, session=first.session, seq=2)
    second = HOST.interpret(second_env, run(HOST.prepare(goal, second_env), second_env))
    argv = log_lines(fake)[1]["argv"]
    assert argv[argv.index("--resume") + 1] == first.session.session_id
    assert second.result is not None
    assert second.session is not None
    assert (second.session.session_id, second.session.turns) == (first.session.session_id, 2)


def test_unknown_session_fails_and_drops_the_session(tmp_path, monkeypatch, fake):
    """Resuming a session claude no longer has fails typed and forgets the session."""
    gone = HostSession(kind="claude", session_id="s-gone", turns=1)
    _, out = turn(tmp_path, monkeypatch, "success", session=gone)
    assert out.failure is not None
    assert out.failure.reason is FailureReason.HOST_EXECUTION_ERROR
    assert out.session is not None
    assert out.session.session_id == ""  # replaces the stored one; never resumed


@pytest.mark.parametrize(
    ("mode", "reason"),
    [
        ("auth", FailureReason.HOST_AUTH),
        ("max_turns", FailureReason.HOST_MAX_TURNS),
        ("execution_error", FailureReason.HOST_EXECUTION_ERROR),
        ("budget", FailureReason.HOST_EXECUTION_ERROR),
        ("malformed", FailureReason.MALFORMED_OUTPUT),
        ("exit", FailureReason.HOST_EXIT),
        ("empty", FailureReason.NO_RESULT),
        ("invalid", FailureReason.INVALID_RESULT),
    ],
)
def test_each_failure_has_its_typed_reason(tmp_path, monkeypatch, fake, mode, reason):
    """Every documented claude failure maps to one FailureReason."""
    _, out = turn(tmp_path, monkeypatch, mode)
    assert out.result is None
    assert out.failure is not None
    assert out.failure.reason is reason, out.failure.message


def test_max_turns_still_reports_cost_and_session(tmp_path, monkeypatch, fake):
    """A run cut off at --max-turns still spent money and keeps its session."""
    _, out = turn(tmp_path, monkeypatch, "max_turns")
    assert out.cost_usd == 0.0123
    assert out.session is not None


def test_usage_limit_with_reset_epoch_becomes_wait_until_the_reset(tmp_path, monkeypatch, fake):
    """ "usage limit reached|<epoch>" is a wait result lasting until that epoch."""
    monkeypatch.setenv("FAKE_CLAUDE_RESET_IN", "7200")
    monkeypatch.setenv("FAKE_CLAUDE_MODE", "rate_limit")
    goal = make_goal(tmp_path, HostKind.CLAUDE)
    envelope = make_envelope(tmp_path, goal, started=utcnow())
    out = HOST.interpret(envelope, run(HOST.prepare(goal, envelope), envelope))
    assert out.failure is None
    assert out.result is not None
    assert out.result.kind is ResultKind.WAIT
    assert out.result.wait_seconds is not None
    # The fake's epoch is "its now + 7200"; the adapter measures from the turn's start.
    assert 7100 < out.result.wait_seconds <= 7300


def test_http_429_without_a_reset_is_a_short_wait_the_account_backs_off(
    tmp_path, monkeypatch, fake
):
    """api_error_status 429 without a reset time: the minimum wait, marked for the account."""
    _, out = turn(tmp_path, monkeypatch, "rate_limit_429")
    assert out.result is not None
    assert out.result.kind is ResultKind.WAIT
    assert out.result.wait_seconds == 60
    assert out.result.evidence == ["host_rate_limited", RESET_UNKNOWN]


# --- interpret, pure ----------------------------------------------------------------------------


def test_structured_output_is_preferred_over_the_text(tmp_path):
    """With --json-schema, claude's structured_output object is the result."""
    goal = make_goal(tmp_path, HostKind.CLAUDE)
    payload = {
        "type": "result",
        "subtype": "success",
        "is_error": False,
        "result": "prose only",
        "session_id": "s-2",
        "structured_output": {"kind": "completed", "summary": "all green"},
    }
    out = HOST.interpret(
        make_envelope(tmp_path, goal), HostOutput(exit_code=0, stdout=json.dumps(payload))
    )
    assert out.result is not None
    assert out.result.kind is ResultKind.COMPLETED


def test_find_result_object_skips_lines_before_it():
    """A warning line before the result object is tolerated."""
    stdout = 'warning: something\n{"type": "result", "subtype": "success", "result": "x"}\n'
    found = find_result_object(stdout)
    assert found is not None
    assert found["result"] == "x"


def test_reported_usage_counts_cache_tokens_and_legacy_cost():
    """Input tokens include cache writes and reads; `cost_usd` (older CLIs) is read too."""
    payload = {
        "usage": {
            "input_tokens": 1,
            "cache_creation_input_tokens": 2,
            "cache_read_input_tokens": 3,
            "output_tokens": 4,
        },
        "cost_usd": 0.5,
    }
    assert reported_usage(payload) == (6, 4, 0.5)


@pytest.mark.parametrize(
    ("mode", "reset_in"), [("session_limit", 7200), ("weekly_limit", 3 * 86400)]
)
def test_subscriber_limits_wait_until_the_printed_reset(
    tmp_path, monkeypatch, fake, mode, reset_in
):
    """`You've hit your session limit · resets 8:56pm (Europe/Berlin)` (or weekly, with a date)."""
    monkeypatch.setenv("TZ", "Europe/Berlin")
    monkeypatch.setenv("FAKE_CLAUDE_MODE", mode)
    monkeypatch.setenv("FAKE_CLAUDE_RESET_IN", str(reset_in))
    goal = make_goal(tmp_path, HostKind.CLAUDE)
    started = utcnow()
    envelope = make_envelope(tmp_path, goal, started=started)
    out = HOST.interpret(envelope, run(HOST.prepare(goal, envelope), envelope))
    assert out.result is not None
    assert out.result.kind is ResultKind.WAIT
    assert out.result.wait_seconds is not None
    assert waits_until_the_printed_minute(out.result.wait_seconds, reset_in, started)


def test_unreachable_api_is_a_wait(tmp_path, monkeypatch, fake):
    """`API Error: Unable to connect to API (ConnectionRefused)` commits a host_unreachable wait."""
    _, out = turn(tmp_path, monkeypatch, "unreachable")
    assert out.result is not None
    assert out.result.evidence == [FailureReason.HOST_UNREACHABLE.value]


def test_fake_rejects_unknown_options(tmp_path, fake):
    """Like Claude Code, the fake refuses an option it does not know."""
    proc = subprocess.run(
        [str(tmp_path / "bin" / "claude"), "-p", "--no-such-flag"],
        input=b"hi", capture_output=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 1
    assert b"error: unknown option '--no-such-flag'" in proc.stderr


def test_server_error_is_a_server_error_wait(tmp_path, monkeypatch, fake):
    """`API Error: 500 ...` (api_error_status 500) commits a bounded host_server_error wait."""
    _, out = turn(tmp_path, monkeypatch, "server_error")
    assert out.result is not None
    assert out.result.kind is ResultKind.WAIT
    assert out.result.evidence == [FailureReason.HOST_SERVER_ERROR.value]
    assert out.result.wait_seconds == 300
