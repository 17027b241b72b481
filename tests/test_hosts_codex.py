"""The codex host adapter against the fake `codex` CLI (loopx.testing.fake_codex) on PATH."""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest

from loopx.agents.hosts.base import HostOutput
from loopx.agents.hosts.codex import CodexHost, parse_events
from loopx.errors import HostMissingError
from loopx.registry.goalrecords import HostKind
from loopx.state import HostSession, update_state
from loopx.turn.failures import FailureReason
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

HOST = CodexHost()


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The fake codex first on PATH; returns its invocation log."""
    return use_fake_cli(tmp_path, monkeypatch, "codex")


def turn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str, session: HostSession | None = None
):
    return interpret_turn(tmp_path, monkeypatch, HOST, mode, session)


# --- prepare ------------------------------------------------------------------------------------


def test_prepare_runs_codex_exec_json_with_prompt_on_stdin(tmp_path, fake):
    """A fresh turn is `codex exec --json ... -` with the prompt on stdin."""
    goal = make_goal(tmp_path, HostKind.CODEX)
    envelope = make_envelope(tmp_path, goal)
    inv = HOST.prepare(goal, envelope)
    assert inv.argv[0] == str(tmp_path / "bin" / "codex")
    assert inv.argv[1:5] == ["exec", "--json", "--skip-git-repo-check", "--cd"]
    assert inv.argv[inv.argv.index("--cd") + 1] == goal.workdir
    assert inv.argv[inv.argv.index("--output-last-message") + 1] == envelope.result_file
    assert inv.argv[-1] == "-"
    assert "resume" not in inv.argv
    prompt = inv.stdin.decode()
    assert "make the tests pass" in prompt
    assert "run pytest -x" in prompt
    assert "rewrite the CLI" in prompt


def test_prepare_writes_a_strict_output_schema(tmp_path, fake):
    """--output-schema names a strict schema: every property required, no extra keys."""
    goal = make_goal(tmp_path, HostKind.CODEX)
    inv = HOST.prepare(goal, make_envelope(tmp_path, goal))
    schema = json.loads(Path(inv.argv[inv.argv.index("--output-schema") + 1]).read_text())

    def objects(node):
        if isinstance(node, dict):
            if "properties" in node:
                yield node
            for value in node.values():
                yield from objects(value)
        elif isinstance(node, list):
            for value in node:
                yield from objects(value)

    found = list(objects(schema))
    assert found
    for obj in found:
        assert obj["additionalProperties"] is False
        assert sorted(obj["required"]) == sorted(obj["properties"])


def test_prepare_resumes_the_goal_thread_with_flags_before_resume(tmp_path, fake):
    """A kept codex session becomes `resume <thread_id>` after every flag, before `-`."""
    goal = make_goal(tmp_path, HostKind.CODEX, ["--model", "o3"])
    session = HostSession(kind="codex", session_id="th-1", turns=2)
    inv = HOST.prepare(goal, make_envelope(tmp_path, goal, session=session))
    assert inv.argv[-3:] == ["resume", "th-1", "-"]
    assert inv.argv.index("--model") < inv.argv.index("resume")
    assert "continues the same goal" in inv.stdin.decode()


def test_prepare_starts_fresh_after_session_max_turns(tmp_path, fake):
    """A session that reached session_max_turns is not resumed."""
    goal = make_goal(tmp_path, HostKind.CODEX, session_max_turns=3)
    session = HostSession(kind="codex", session_id="th-1", turns=3)
    assert "resume" not in HOST.prepare(goal, make_envelope(tmp_path, goal, session=session)).argv


def test_prepare_ignores_another_kinds_session(tmp_path, fake):
    """A claude session is never handed to codex."""
    goal = make_goal(tmp_path, HostKind.CODEX)
    session = HostSession(kind="claude", session_id="s-1", turns=1)
    assert "resume" not in HOST.prepare(goal, make_envelope(tmp_path, goal, session=session)).argv


def test_prepare_uses_the_program_argv_names(tmp_path, fake):
    """argv naming a program first runs it, and the rest are flags."""
    program = str(tmp_path / "bin" / "codex")
    goal = make_goal(tmp_path, HostKind.CODEX, [program, "--sandbox", "workspace-write"])
    inv = HOST.prepare(goal, make_envelope(tmp_path, goal))
    assert inv.argv[0] == program
    assert inv.argv[inv.argv.index("--sandbox") + 1] == "workspace-write"


def test_prepare_keeps_a_user_output_schema(tmp_path, fake):
    """A user's own --output-schema replaces LoopX's."""
    goal = make_goal(tmp_path, HostKind.CODEX, ["--output-schema", "/x/schema.json"])
    inv = HOST.prepare(goal, make_envelope(tmp_path, goal))
    assert inv.argv.count("--output-schema") == 1
    assert inv.argv[inv.argv.index("--output-schema") + 1] == "/x/schema.json"


def test_prepare_without_codex_on_path_raises_host_missing(tmp_path, monkeypatch):
    """No codex on PATH is HostMissingError naming the program."""
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    goal = make_goal(tmp_path, HostKind.CODEX)
    with pytest.raises(HostMissingError) as info:
        HOST.prepare(goal, make_envelope(tmp_path, goal))
    assert info.value.program == "codex"


# --- interpret, through the real fake process ---------------------------------------------------


def test_success_gives_the_result_tokens_and_a_new_session(tmp_path, monkeypatch, fake):
    """A completed turn yields its result, its token usage and the thread to resume."""
    _, out = turn(tmp_path, monkeypatch, "success")
    assert out.failure is None
    assert out.result is not None
    assert out.result.kind is ResultKind.PROGRESS
    assert (out.input_tokens, out.output_tokens, out.cost_usd) == (1000, 200, 0.0)
    assert out.session is not None
    assert (out.session.kind, out.session.turns) == ("codex", 1)
    assert log_lines(fake)[0]["argv"][-1] == "-"


def test_result_wrapped_in_prose_and_a_fence_is_found(tmp_path, monkeypatch, fake):
    """A final message with prose around a ```json fence still yields the result."""
    _, out = turn(tmp_path, monkeypatch, "prose")
    assert out.result is not None
    assert out.result.summary == "fake codex turn"


def test_session_resumes_across_two_turns_and_counts_only_new_tokens(tmp_path, monkeypatch, fake):
    """Turn 2 resumes turn 1's thread; its usage is the increase of codex's cumulative totals."""
    monkeypatch.setenv("FAKE_CODEX_MODE", "success")
    goal = make_goal(tmp_path, HostKind.CODEX)
    first_env = make_envelope(tmp_path, goal, seq=1)
    first = HOST.interpret(first_env, run(HOST.prepare(goal, first_env), first_env))
    assert first.session is not None
    monkeypatch.setenv("FAKE_CODEX_TOKENS", "300,50")
    second_env = make_envelope(tmp_path, goal, session=first.session, seq=2)
    second = HOST.interpret(second_env, run(HOST.prepare(goal, second_env), second_env))
    argv = log_lines(fake)[1]["argv"]
    assert argv[-3:] == ["resume", first.session.session_id, "-"]
    assert second.session is not None
    assert (second.session.session_id, second.session.turns) == (first.session.session_id, 2)
    assert (second.input_tokens, second.output_tokens) == (300, 50)
    assert (second.session.reported_input_tokens, second.session.reported_output_tokens) == (
        1300,
        250,
    )


def test_unknown_thread_fails_and_drops_the_session(tmp_path, monkeypatch, fake):
    """Resuming a thread codex no longer has fails typed and forgets the session."""
    gone = HostSession(kind="codex", session_id="th-gone", turns=1)
    _, out = turn(tmp_path, monkeypatch, "success", session=gone)
    assert out.failure is not None
    assert out.failure.reason is FailureReason.HOST_EXECUTION_ERROR
    assert "resume" in out.failure.message
    assert out.session is not None
    assert out.session.session_id == ""  # replaces the stored one; never resumed


def test_transient_error_events_before_completion_are_ignored(tmp_path, monkeypatch, fake):
    """An `error` event followed by turn.completed is a retry that recovered."""
    _, out = turn(tmp_path, monkeypatch, "retry_then_success")
    assert out.result is not None


@pytest.mark.parametrize(
    ("mode", "reason"),
    [
        ("auth", FailureReason.HOST_AUTH),
        ("failed", FailureReason.HOST_EXECUTION_ERROR),
        ("malformed", FailureReason.MALFORMED_OUTPUT),
        ("no_completion", FailureReason.MALFORMED_OUTPUT),
        ("exit", FailureReason.HOST_EXIT),
        ("no_message", FailureReason.NO_RESULT),
        ("invalid", FailureReason.INVALID_RESULT),
    ],
)
def test_each_failure_has_its_typed_reason(tmp_path, monkeypatch, fake, mode, reason):
    """Every documented codex failure maps to one FailureReason."""
    _, out = turn(tmp_path, monkeypatch, mode)
    assert out.result is None
    assert out.failure is not None
    assert out.failure.reason is reason, out.failure.message


@pytest.mark.parametrize("reset_in", [7200, 3 * 86400])
def test_rate_limit_waits_until_the_local_clock_codex_printed(
    tmp_path, monkeypatch, fake, reset_in
):
    """`try again at 9:23 PM.` or `at Dec 3rd, 2026 8:23 PM.`, host zone: a wait until then."""
    monkeypatch.setenv("TZ", "Europe/Berlin")
    monkeypatch.setenv("FAKE_CODEX_MODE", "rate_limit")
    monkeypatch.setenv("FAKE_CODEX_RESET_IN", str(reset_in))
    goal = make_goal(tmp_path, HostKind.CODEX)
    started = datetime.now(UTC)
    envelope = make_envelope(tmp_path, goal, started=started)
    out = HOST.interpret(envelope, run(HOST.prepare(goal, envelope), envelope))
    assert out.failure is None
    assert out.result is not None
    assert out.result.kind is ResultKind.WAIT
    assert out.result.wait_seconds is not None
    assert waits_until_the_printed_minute(out.result.wait_seconds, reset_in, started)
    assert out.result.turn_key == envelope.turn_key
    assert out.session is not None  # the thread is kept for when the limit resets


def test_fake_rejects_exec_flags_after_resume(tmp_path, fake):
    """Like codex 0.171, the fake refuses `--cd` after `resume` (clap's message, exit 2)."""
    bin_codex = tmp_path / "bin" / "codex"
    proc = subprocess.run(
        [str(bin_codex), "exec", "--json", "resume", "th-1", "--cd", str(tmp_path), "-"],
        input=b"hi", capture_output=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 2
    assert b"error: unexpected argument '--cd' found" in proc.stderr


def test_lost_thread_message_is_the_one_error_line(tmp_path, monkeypatch, fake):
    """The WARNING codex prints first is not part of the failure message."""
    gone = HostSession(kind="codex", session_id="th-gone", turns=1)
    _, out = turn(tmp_path, monkeypatch, "success", session=gone)
    assert out.failure is not None
    assert (
        "could not resume its session: Error: thread/resume: thread/resume failed"
        in out.failure.message
    )
    assert "WARNING" not in out.failure.message


def test_failure_keeps_the_thread_for_the_next_turn(tmp_path, monkeypatch, fake):
    """A failed turn still reports the thread it ran in."""
    _, out = turn(tmp_path, monkeypatch, "failed")
    assert out.session is not None
    assert out.session.turns == 1


# --- interpret, pure ----------------------------------------------------------------------------


def test_truncated_event_stream_falls_back_to_the_last_message_file(tmp_path):
    """When stdout outgrew its capture, --output-last-message still carries the result."""
    goal = make_goal(tmp_path, HostKind.CODEX)
    envelope = make_envelope(tmp_path, goal)
    stdout = json.dumps({"type": "thread.started", "thread_id": "th-9"}) + "\n"
    output = HostOutput(
        exit_code=0,
        stdout=stdout,
        stdout_dropped=5_000_000,
        result_file_text='{"kind": "completed", "summary": "done"}',
    )
    out = HOST.interpret(envelope, output)
    assert out.result is not None
    assert out.result.kind is ResultKind.COMPLETED
    assert out.session is not None
    assert out.session.session_id == "th-9"


def test_killed_by_signal_is_host_exit(tmp_path):
    """A host killed by a signal without a terminal event is host_exit."""
    goal = make_goal(tmp_path, HostKind.CODEX)
    out = HOST.interpret(make_envelope(tmp_path, goal), HostOutput(exit_code=None, signal=9))
    assert out.failure is not None
    assert out.failure.reason is FailureReason.HOST_EXIT
    assert "signal 9" in out.failure.message


def test_parse_events_skips_unknown_events_and_counts_junk():
    """Unknown event types are skipped; non-JSON lines are counted."""
    stdout = "\n".join(
        [
            json.dumps({"type": "thread.started", "thread_id": "t"}),
            json.dumps({"type": "item.plan.delta", "item_id": "x", "delta": "y"}),
            "garbage",
            json.dumps(
                {"type": "turn.completed", "usage": {"input_tokens": 5, "output_tokens": 1}}
            ),
        ]
    )
    parsed = parse_events(stdout)
    assert (parsed.thread_id, parsed.terminal, parsed.events, parsed.junk_lines) == (
        "t",
        "turn.completed",
        3,
        1,
    )
    assert (parsed.input_tokens, parsed.output_tokens) == (5, 1)


# --- goal add / reset-session ------------------------------------------------------------------


def test_goal_add_refuses_codex_missing_from_path(cli, tmp_path, monkeypatch):
    """`goal add --host-kind codex` without codex on PATH fails with a clear message."""
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    proc = cli.run("goal", "add", "g1", "--objective", "x", "--host-kind", "codex")
    assert proc.returncode != 0
    assert "codex host program 'codex' was not found on PATH" in proc.stderr
    assert "hint:" in proc.stderr


def test_goal_add_accepts_codex_on_path_with_extra_flags(cli, fake):
    """With codex on PATH, --host holds extra flags for it."""
    out = cli.json(
        "goal", "add", "g1", "--objective", "x", "--host-kind", "codex", "--host=--model o3"
    )
    assert out["goal"]["host"] == {
        "kind": "codex",
        "argv": ["--model", "o3"],
        "session_max_turns": None,
        "unreachable_after_s": None,
    }


def test_reset_session_drops_the_kept_session(cli, layout):
    """`goal reset-session` clears state.host_session and reports what it dropped."""
    cli.run("goal", "add", "g1", "--objective", "x", check=True)
    update_state(
        layout,
        "g1",
        lambda s: s.model_copy(
            update={"host_session": HostSession(kind="codex", session_id="th-1", turns=3)}
        ),
    )
    out = cli.json("goal", "reset-session", "g1")
    assert out["dropped"]["session_id"] == "th-1"
    assert cli.json("goal", "show", "g1")["state"]["host_session"] is None


def test_goal_add_sets_session_max_turns(cli, fake):
    """--session-max-turns is stored on the host spec."""
    out = cli.json(
        "goal", "add", "g1", "--objective", "x", "--host-kind", "codex", "--session-max-turns", "5"
    )
    assert out["goal"]["host"]["session_max_turns"] == 5


def test_server_error_is_a_server_error_wait(tmp_path, monkeypatch, fake):
    """Codex's 5xx wording ("experiencing high demand") commits a host_server_error wait."""
    _, out = turn(tmp_path, monkeypatch, "server_error")
    assert out.result is not None
    assert out.result.kind is ResultKind.WAIT
    assert out.result.evidence == [FailureReason.HOST_SERVER_ERROR.value]
