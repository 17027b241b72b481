"""The gemini host adapter against the fake `gemini` CLI (loopx.testing.fake_gemini) on PATH."""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest

from loopx.agents.hosts import host_for
from loopx.agents.hosts.base import HostOutput
from loopx.agents.hosts.gemini import GeminiHost, find_json_report, reported_tokens
from loopx.agents.hosts.stallwatch import StallWatcher
from loopx.errors import HostMissingError
from loopx.model import utcnow
from loopx.registry.goalrecords import HostKind
from loopx.state import HostSession
from loopx.turn.failures import FailureReason
from loopx.turn.outcome import ResultKind
from tests.hostkit import interpret_turn, log_lines, make_envelope, make_goal, run, use_fake_cli

HOST = GeminiHost()


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The fake gemini first on PATH; returns its invocation log."""
    return use_fake_cli(tmp_path, monkeypatch, "gemini")


def turn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str, session: HostSession | None = None
):
    return interpret_turn(tmp_path, monkeypatch, HOST, mode, session)


def fake_cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [str(tmp_path / "bin" / "gemini"), *args],
        input=b"hi", capture_output=True, timeout=60, check=False,
    )  # fmt: skip


# --- prepare ------------------------------------------------------------------------------------


def test_gemini_is_a_registered_kind():
    """`--host-kind gemini` resolves through the loopx.hosts entry points."""
    assert isinstance(host_for("gemini"), GeminiHost)


def test_prepare_runs_headless_json_with_prompt_on_stdin(tmp_path, fake):
    """A fresh turn is `gemini --output-format json FLAGS --prompt ""`, the prompt on stdin."""
    goal = make_goal(tmp_path, HostKind.GEMINI, ["--approval-mode", "yolo"])
    inv = HOST.prepare(goal, make_envelope(tmp_path, goal))
    assert inv.argv == [
        str(tmp_path / "bin" / "gemini"),
        "--output-format",
        "json",
        "--approval-mode",
        "yolo",
        "--prompt",
        "",
    ]
    assert "make the tests pass" in inv.stdin.decode()
    assert inv.stall is not None


def test_prepare_resumes_the_goal_session(tmp_path, fake):
    """A kept gemini session becomes --resume <session_id>."""
    goal = make_goal(tmp_path, HostKind.GEMINI)
    session = HostSession(kind="gemini", session_id="s-1", turns=4)
    argv = HOST.prepare(goal, make_envelope(tmp_path, goal, session=session)).argv
    assert argv[argv.index("--resume") + 1] == "s-1"


def test_prepare_without_gemini_on_path_raises_host_missing(tmp_path, monkeypatch):
    """No gemini on PATH is HostMissingError naming the program."""
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    goal = make_goal(tmp_path, HostKind.GEMINI)
    with pytest.raises(HostMissingError) as info:
        HOST.prepare(goal, make_envelope(tmp_path, goal))
    assert info.value.program == "gemini"


# --- interpret, through the real fake process ---------------------------------------------------


def test_success_gives_the_result_tokens_and_session(tmp_path, monkeypatch, fake):
    """A successful run yields its result, tokens (cached prompt and thoughts included), session."""
    _, out = turn(tmp_path, monkeypatch, "success")
    assert out.failure is None, out.failure
    assert out.result is not None
    assert out.result.kind is ResultKind.PROGRESS
    assert (out.input_tokens, out.output_tokens, out.cost_usd) == (1500, 200, 0.0)
    assert out.session is not None
    assert (out.session.kind, out.session.turns) == ("gemini", 1)
    assert log_lines(fake)[0]["cwd"] == str(tmp_path / "work")


def test_result_wrapped_in_prose_is_found(tmp_path, monkeypatch, fake):
    """A final message with prose around a ```json fence still yields the result."""
    _, out = turn(tmp_path, monkeypatch, "prose")
    assert out.result is not None
    assert out.result.summary == "fake gemini turn"


def test_session_resumes_across_two_turns(tmp_path, monkeypatch, fake):
    """Turn 2 passes --resume with turn 1's session id and counts a second turn."""
    monkeypatch.setenv("FAKE_GEMINI_MODE", "success")
    goal = make_goal(tmp_path, HostKind.GEMINI)
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
    """`Error resuming session: ...` (exit 42) fails typed and forgets the session."""
    gone = HostSession(kind="gemini", session_id="s-gone", turns=1)
    _, out = turn(tmp_path, monkeypatch, "success", session=gone)
    assert out.failure is not None
    assert out.failure.reason is FailureReason.HOST_EXECUTION_ERROR
    assert "Error resuming session" in out.failure.message
    assert out.session is not None
    assert out.session.session_id == ""


@pytest.mark.parametrize(
    ("mode", "reason"),
    [
        ("auth", FailureReason.HOST_AUTH),
        ("exit", FailureReason.HOST_EXIT),
        ("empty", FailureReason.NO_RESULT),
    ],
)
def test_each_failure_has_its_typed_reason(tmp_path, monkeypatch, fake, mode, reason):
    """Every gemini failure that is not the provider's passing trouble is a typed failure."""
    _, out = turn(tmp_path, monkeypatch, mode)
    assert out.result is None
    assert out.failure is not None
    assert out.failure.reason is reason, out.failure.message


@pytest.mark.parametrize(
    ("mode", "evidence", "seconds"),
    [
        ("rate_limit", FailureReason.HOST_RATE_LIMITED, 120),
        ("server_error", FailureReason.HOST_SERVER_ERROR, 300),
        ("unreachable", FailureReason.HOST_UNREACHABLE, 300),
    ],
)
def test_provider_trouble_is_a_wait(tmp_path, monkeypatch, fake, mode, evidence, seconds):  # noqa: PLR0917
    """429 (its retry delay), 500 and a refused connection commit a bounded wait."""
    _, out = turn(tmp_path, monkeypatch, mode)
    assert out.failure is None, out.failure
    assert out.result is not None
    assert out.result.kind is ResultKind.WAIT
    assert out.result.evidence == [evidence.value]
    assert out.result.wait_seconds == seconds


def test_daily_quota_waits_until_midnight_pacific(tmp_path, monkeypatch, fake):
    """The daily quota (no reset given) waits until the next midnight America/Los_Angeles."""
    monkeypatch.setenv("FAKE_GEMINI_MODE", "daily_quota")
    goal = make_goal(tmp_path, HostKind.GEMINI)
    # 2026-01-02 03:00 UTC is 19:00 on Jan 1 in Los Angeles: five hours to midnight.
    envelope = make_envelope(tmp_path, goal, started=datetime(2026, 1, 2, 3, 0, tzinfo=UTC))
    out = HOST.interpret(envelope, run(HOST.prepare(goal, envelope), envelope))
    assert out.result is not None
    assert out.result.evidence == [FailureReason.HOST_RATE_LIMITED.value]
    assert out.result.wait_seconds == 5 * 3600


def test_retry_loop_is_stopped_by_the_stall_watch_and_read_as_unreachable(tmp_path, fake):
    """The retry lines of an unreachable server match the stall watch; stopped, it is a wait."""
    goal = make_goal(tmp_path, HostKind.GEMINI)
    envelope = make_envelope(tmp_path, goal, started=utcnow())
    inv = HOST.prepare(goal, envelope)
    assert inv.stall is not None
    lines = "Attempt 3 failed. Retrying with backoff... Error: exception TypeError: fetch failed "
    lines += "sending request\n    at async Models.generateContentStream (file:///x.js:1:2)\n"

    class Kept:
        def __init__(self, data: bytes) -> None:
            self.kept = bytearray(data)

    clock = iter([0.0, 500.0])
    watcher = StallWatcher(inv.stall, clock=lambda: next(clock))
    assert not watcher(Kept(b""), Kept(lines.encode()))
    assert watcher(Kept(b""), Kept((lines * 2).encode()))
    # Stopped, 0.61 handles SIGTERM and exits 0 without a report; killed, it has no exit code.
    for code, signal in ((0, None), (None, 9)):
        output = HostOutput(exit_code=code, signal=signal, stderr=lines * 3)
        out = HOST.interpret(envelope, output)
        assert out.result is not None
        assert out.result.evidence == [FailureReason.HOST_UNREACHABLE.value]


# --- pure parsing -------------------------------------------------------------------------------


def test_find_json_report_skips_the_stack_trace_before_it():
    """The report is the last pretty-printed object, after warnings and a stack trace."""
    report = {"session_id": "s", "error": {"type": "Error", "message": "m", "code": 500}}
    text = "Warning: x\n{\n  status: 500\n}\n" + json.dumps(report, indent=2) + "\n"
    assert find_json_report(text) == report
    assert find_json_report("no json here") is None


def test_reported_tokens_sum_every_model():
    """The router's model counts too: it is the user's quota."""
    payload = {
        "stats": {
            "models": {
                "a": {"tokens": {"prompt": 10, "candidates": 5, "thoughts": 1}},
                "b": {"tokens": {"prompt": 1200, "candidates": 80, "thoughts": 0}},
            }
        }
    }
    assert reported_tokens(payload) == (1210, 86)
    assert reported_tokens({}) == (0, 0)


# --- the fake's argument grammar ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--bogus", "-p", "x"], "Unknown argument: bogus"),
        (["-p"], "Not enough arguments following: p"),
        (["--output-format", "xml", "-p", "x"], 'Argument: output-format, Given: "xml"'),
        (["--yolo", "--approval-mode", "plan", "-p", "x"], "Cannot use both --yolo (-y)"),
    ],
)
def test_fake_refuses_what_the_real_cli_refuses(tmp_path, fake, args, message):
    """Gemini CLI 0.61's yargs errors, exit 1."""
    proc = fake_cli(tmp_path, *args)
    assert proc.returncode == 1
    assert message in proc.stderr.decode()


def test_fake_accepts_inline_values_and_short_aliases(tmp_path, fake):
    """`--approval-mode=yolo`, `-o json` and `-m MODEL` are accepted like the real CLI."""
    proc = fake_cli(tmp_path, "-o", "json", "-m", "gemini-x", "--approval-mode=yolo", "-p", "")
    assert proc.returncode == 0, proc.stderr
    assert "gemini-x" in json.loads(proc.stdout)["stats"]["models"]
