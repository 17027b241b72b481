"""The ``qwen`` host: Qwen Code run as ``qwen --output-format json``, the prompt on stdin.

One turn is one headless run (``--resume <session_id>`` continues the goal's
session). Qwen Code 0.15 prints, when it ends, one JSON array of messages on
stdout: a ``system``/``init`` message, the ``assistant`` messages, and last a
``type: "result"`` object shaped like Claude Code's (``subtype``,
``is_error``, ``result``, ``session_id``, ``num_turns``, ``usage`` with
``input_tokens``, ``output_tokens``, ``cache_read_input_tokens``). A failed
model call does not fail the run: it ends ``success`` with ``result``
``[API Error: <status> <message>]`` after the CLI's own retries (seven for a
429 or 5xx). A session it cannot find is one stderr line, ``No saved session
found with ID ...``, exit 1.
"""

from __future__ import annotations

import json
import re
from typing import Any, ClassVar, Final

from loopx.agents.hosts.base import HostInvocation, HostOutput, Interpretation
from loopx.agents.hosts.diagnosis import (
    AUTH_STATUSES,
    HTTP_TOO_MANY_REQUESTS,
    Diagnosis,
    diagnose,
    failure_for,
    is_server_status,
    rate_limited,
    reported_count,
    server_error,
    unreachable,
)
from loopx.agents.hosts.extract import parse_result
from loopx.agents.hosts.prompt import build_prompt
from loopx.agents.hosts.session import no_session, session_after_turn, session_to_resume
from loopx.registry.goalrecords import Goal, HostKind
from loopx.registry.hostprogram import require_program, split_program
from loopx.state import HostSession
from loopx.turn.failures import FailureReason, TurnFailure
from loopx.turn.protocol import Envelope, HostResult

STDERR_TAIL: Final = 400
# How Qwen Code 0.15 words a model call that failed: "[API Error: 401 mock: invalid x-api-key]",
# "[API Error: Connection error. (cause: fetch failed)]"; the HTTP status, when there is one, first.
API_ERROR: Final = re.compile(r"^\[API Error: (?:(\d{3}) )?(.*)\]", re.DOTALL)


def find_result(stdout: str) -> dict[str, Any] | None:
    """The ``type: "result"`` message of Qwen Code's JSON array on stdout, or None. Pure.

    A line-by-line scan from the end tolerates warnings printed before the
    array (and ``stream-json`` output, one message a line).
    """
    for text in [stdout.strip(), *reversed(stdout.splitlines())]:
        line = text.strip()
        if not line.startswith(("[", "{")):
            continue
        try:
            value = json.loads(line)
        except ValueError:
            continue
        messages = value if isinstance(value, list) else [value]
        for message in reversed(messages):
            if isinstance(message, dict) and message.get("type") == "result":
                return message
    return None


def reported_tokens(payload: dict[str, Any]) -> tuple[int, int]:
    """(input, output) tokens of one run; input counts the cached prompt tokens too. Pure."""
    usage = payload.get("usage")
    usage = usage if isinstance(usage, dict) else {}
    return reported_count(usage.get("input_tokens")), reported_count(usage.get("output_tokens"))


class QwenHost:
    """The adapter of ``--host-kind qwen``."""

    kind = HostKind.QWEN
    # The versions the realhosts suite ran and tests/realhosts/captures/ recorded.
    tested_versions: ClassVar[tuple[str, ...]] = ("0.15.10",)
    # What `prepare` relies on, looked for in `qwen --help` by the canary.
    help_argv: ClassVar[tuple[str, ...]] = ("--help",)
    help_flags: ClassVar[tuple[str, ...]] = ("--output-format", "--resume")

    def prepare(self, goal: Goal, envelope: Envelope) -> HostInvocation:
        """``qwen --output-format json [--resume ID] ...`` with the prompt on stdin.

        ``goal.host.argv`` adds flags (``--model``, ``--approval-mode yolo``,
        ``--auth-type``) and may name the program first. Qwen Code keeps its
        sessions per project directory: the turn runner starts it in the
        goal's workdir.

        Raises:
            HostMissingError: the qwen program is not on PATH.

        """
        program = require_program(goal.host)
        _, extra = split_program(goal.host)
        resume = session_to_resume(goal, envelope.state.host_session)
        argv = [program, "--output-format", "json"]
        if resume is not None:
            argv += ["--resume", resume.session_id]
        argv += extra
        prompt = build_prompt(envelope, resumed=resume is not None)
        return HostInvocation(argv=argv, stdin=prompt.encode())

    def interpret(self, envelope: Envelope, output: HostOutput) -> Interpretation:
        """The result in Qwen Code's ``result`` message, or a typed failure. Pure."""
        previous = envelope.state.host_session
        payload = find_result(output.stdout)
        if payload is None:
            failure = _without_result(envelope, output)
            lost = diagnose(output.stderr) is Diagnosis.SESSION_MISSING
            return Interpretation.of(failure, session=no_session(self.kind) if lost else previous)
        tokens_in, tokens_out = reported_tokens(payload)
        session_id = payload.get("session_id")
        session: HostSession | None = previous
        if isinstance(session_id, str) and session_id:
            session = session_after_turn(self.kind, previous, session_id)
        return Interpretation.of(
            _outcome(envelope, payload),
            session=session,
            input_tokens=tokens_in,
            output_tokens=tokens_out,
        )


def _from_error(message: str, envelope: Envelope, status: int | None) -> HostResult | TurnFailure:
    diagnosis = diagnose(message)
    if status == HTTP_TOO_MANY_REQUESTS or (status is None and diagnosis is Diagnosis.RATE_LIMIT):
        return rate_limited("qwen", message, envelope)
    if status in AUTH_STATUSES:
        text = f"{message} (HTTP {status})"
        return failure_for("qwen", text, default=FailureReason.HOST_AUTH)
    if is_server_status(status) or (status is None and diagnosis is Diagnosis.SERVER_ERROR):
        return server_error("qwen", message, envelope)
    if diagnosis is Diagnosis.UNREACHABLE:
        return unreachable("qwen", message, envelope)
    return failure_for("qwen", message, default=FailureReason.HOST_EXECUTION_ERROR)


def _error_text(payload: dict[str, Any]) -> str:
    errors = payload.get("errors", payload.get("error"))
    if isinstance(errors, list):
        parts = [e if isinstance(e, str) else json.dumps(e) for e in errors]
    else:
        parts = [] if errors is None else [str(errors)]
    result = payload.get("result")
    if isinstance(result, str) and result.strip():
        parts.insert(0, result)
    return "; ".join(parts) or f"qwen reported {payload.get('subtype', 'an error')}"


def _outcome(envelope: Envelope, payload: dict[str, Any]) -> HostResult | TurnFailure:
    subtype = payload.get("subtype")
    if subtype == "error_max_turns":
        return TurnFailure.of(
            FailureReason.HOST_MAX_TURNS,
            f"qwen stopped at its turn limit after {payload.get('num_turns')} turns "
            "(--max-session-turns); raise it in the goal's host flags or split the work",
        )
    text = payload.get("result")
    api_error = API_ERROR.match(text.strip()) if isinstance(text, str) else None
    if api_error is not None:
        status = int(api_error.group(1)) if api_error.group(1) else None
        return _from_error(text.strip() if isinstance(text, str) else "", envelope, status)
    if payload.get("is_error") is True or (
        isinstance(subtype, str) and subtype.startswith("error")
    ):
        return _from_error(_error_text(payload), envelope, None)
    if not isinstance(text, str) or not text.strip():
        return TurnFailure.of(FailureReason.NO_RESULT, "qwen finished without a final message")
    return parse_result(text, source="qwen's final message")


def _without_result(envelope: Envelope, output: HostOutput) -> HostResult | TurnFailure:
    """No result message on stdout: judge by exit status and stderr."""
    stderr = output.stderr.strip()
    if output.exit_code != 0 or output.signal is not None:
        if stderr and diagnose(stderr) is not Diagnosis.OTHER:
            return _from_error(stderr, envelope, None)
        how = f"signal {output.signal}" if output.signal is not None else f"code {output.exit_code}"
        tail = (stderr or output.stdout.strip())[-STDERR_TAIL:] or "(no output)"
        return TurnFailure.of(FailureReason.HOST_EXIT, f"qwen exited with {how}: {tail}")
    excerpt = output.stdout.strip()[:200] or "(empty)"
    return TurnFailure.of(
        FailureReason.MALFORMED_OUTPUT,
        f"qwen printed no result message (is --output-format json in effect?); stdout begins: "
        f"{excerpt!r}",
    )
