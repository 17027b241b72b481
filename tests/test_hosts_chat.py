"""The opencode, qwen and pi adapters: what the shared contract does not pin down.

The recorded transcripts (tests/test_host_contract.py) prove each failure's outcome; here
are the argv each adapter builds and how it adds up a run of several model calls.
"""

from __future__ import annotations

import json
from pathlib import Path

from loopx.agents.hosts.base import HostOutput
from loopx.agents.hosts.opencode import OpencodeHost, stream_errors
from loopx.agents.hosts.pi import PiHost
from loopx.agents.hosts.qwen import QwenHost
from loopx.registry.goalrecords import HostKind
from loopx.state import HostSession
from loopx.turn.failures import FailureReason
from loopx.turn.outcome import ResultKind
from tests.hostkit import make_envelope, make_goal

ANSWER = json.dumps({"kind": "progress", "summary": "did it"})


def _program(tmp_path: Path, name: str) -> str:
    path = tmp_path / "bin" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return str(path)


def _step(tokens_in: int, tokens_out: int, cost: float, read: int = 0) -> str:
    tokens = {"input": tokens_in, "output": tokens_out, "reasoning": 5, "cache": {"read": read}}
    part = {"type": "step-finish", "reason": "stop", "tokens": tokens, "cost": cost}
    return json.dumps({"type": "step_finish", "sessionID": "ses_1", "part": part})


def test_opencode_runs_in_the_workdir_whatever_pwd_says(tmp_path):
    """OpenCode reads $PWD first: the adapter passes --dir and PWD, both the workdir."""
    goal = make_goal(tmp_path, HostKind.OPENCODE, [_program(tmp_path, "opencode"), "--auto"])
    session = HostSession(kind="opencode", session_id="ses_9")
    envelope = make_envelope(tmp_path, goal, session=session)
    invocation = OpencodeHost().prepare(goal, envelope)
    assert invocation.argv[1:] == [
        "run", "--format", "json", "--print-logs", "--log-level", "ERROR",
        "--dir", goal.workdir, "--session", "ses_9", "--auto",
    ]  # fmt: skip
    assert invocation.env == {"PWD": goal.workdir}
    assert invocation.stall is not None


def test_opencode_adds_up_its_steps(tmp_path):
    """Tokens and cost are per step: a run of two steps reports their sums, cache reads included."""
    text = json.dumps({"type": "text", "sessionID": "ses_1", "part": {"text": ANSWER}})
    stdout = "\n".join([_step(100, 10, 0.5, read=50), text, _step(200, 20, 0.25)])
    goal = make_goal(tmp_path, HostKind.OPENCODE)
    seen = OpencodeHost().interpret(
        make_envelope(tmp_path, goal), HostOutput(exit_code=0, stdout=stdout)
    )
    assert seen.result is not None
    assert seen.result.summary == "did it"
    assert (seen.input_tokens, seen.output_tokens, seen.cost_usd) == (350, 40, 0.75)


def test_opencode_reads_the_last_logged_stream_error():
    """Its retries are stderr log lines; the message is the quoted error.error value."""
    line = (
        'timestamp=T level=ERROR run=r message="stream error" providerID=p '
        'error.error="AI_APICallError: {}"'
    )
    stderr = "\n".join([line.format("first"), "noise", line.format("too many requests")])
    assert stream_errors(stderr) == ["AI_APICallError: first", "AI_APICallError: too many requests"]


def test_qwen_reads_a_status_from_its_api_error_text(tmp_path):
    """`[API Error: 503 ...]` in a run that says success is a server error wait, not a result."""
    result = {"type": "result", "subtype": "success", "is_error": False, "session_id": "s1",
              "result": "[API Error: 503 upstream overloaded]", "usage": {}}  # fmt: skip
    goal = make_goal(tmp_path, HostKind.QWEN)
    seen = QwenHost().interpret(
        make_envelope(tmp_path, goal), HostOutput(exit_code=0, stdout=json.dumps([result]))
    )
    assert seen.result is not None
    assert (seen.result.kind, seen.result.evidence) == (
        ResultKind.WAIT,
        [FailureReason.HOST_SERVER_ERROR.value],
    )


def test_pi_adds_up_its_assistant_messages(tmp_path):
    """Each assistant message_end carries its own usage and cost; the run reports their sums."""

    def message(text: str, tokens_in: int, cost: float) -> str:
        usage = {"input": tokens_in, "output": 7, "cacheRead": 3, "cost": {"total": cost}}
        content = [{"type": "text", "text": text}]
        body = {"role": "assistant", "content": content, "usage": usage, "stopReason": "stop"}
        return json.dumps({"type": "message_end", "message": body})

    header = json.dumps({"type": "session", "id": "01a2"})
    stdout = "\n".join([header, message("thinking", 10, 0.1), message(ANSWER, 20, 0.2)])
    goal = make_goal(tmp_path, HostKind.PI)
    seen = PiHost().interpret(make_envelope(tmp_path, goal), HostOutput(exit_code=0, stdout=stdout))
    assert seen.result is not None
    assert seen.result.summary == "did it"
    assert (seen.input_tokens, seen.output_tokens) == (36, 14)
    assert abs(seen.cost_usd - 0.3) < 1e-9
    assert seen.session is not None
    assert seen.session.session_id == "01a2"
