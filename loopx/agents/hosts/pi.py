"""The ``pi`` host: the pi coding agent run as ``pi -p --mode json``, the prompt on stdin.

One turn is one print-mode run (``--session <id>`` continues the goal's
session). With ``--mode json`` pi 0.73 prints one JSON event a line on stdout:
first the session header (``type: "session"``, ``id``), then the agent's
events; each ``message_end`` of an ``assistant`` message carries ``content``
(``text`` and ``toolCall`` parts), ``usage`` (``input``, ``output``,
``cacheRead``, ``cacheWrite``, ``cost.total`` in USD) and ``stopReason``
(``stop``, ``toolUse``, ``length``, ``error``, ``aborted``; an ``error`` has
``errorMessage``, the HTTP status first: ``401 invalid x-api-key``). A failed
model call ends the run with exit 0 and that message, after pi's own retries
(``auto_retry_start`` events; settings ``retry``). A session it cannot find is
``No session found matching '<id>'`` on stderr, exit 1.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, ClassVar, Final

from loopx.agents.hosts._parse import typed_events
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
_STATUS_FIRST: Final = re.compile(r"^(\d{3}) ")


@dataclass
class PiEvents:
    """What a ``pi --mode json`` stdout said, parsed leniently."""

    session_id: str | None = None
    last_assistant: dict[str, Any] | None = None  # the last assistant message that ended
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    events: int = 0
    junk_lines: int = 0


def _on_assistant(parsed: PiEvents, message: dict[str, Any]) -> None:
    parsed.last_assistant = message
    usage = message.get("usage")
    usage = usage if isinstance(usage, dict) else {}
    parsed.input_tokens += sum(
        reported_count(usage.get(key)) for key in ("input", "cacheRead", "cacheWrite")
    )
    parsed.output_tokens += reported_count(usage.get("output"))
    cost = usage.get("cost")
    total = cost.get("total") if isinstance(cost, dict) else None
    if isinstance(total, int | float) and total >= 0:
        parsed.cost_usd += float(total)


def parse_events(stdout: str) -> PiEvents:
    """Read a ``pi --mode json`` stdout. Pure; unknown events are skipped."""
    parsed = PiEvents()
    events, parsed.junk_lines = typed_events(stdout)
    parsed.events = len(events)
    for event in events:
        if event["type"] == "session" and isinstance(event.get("id"), str):
            parsed.session_id = parsed.session_id or event["id"]
        message = event.get("message")
        if (
            event["type"] == "message_end"
            and isinstance(message, dict)
            and message.get("role") == "assistant"
        ):
            _on_assistant(parsed, message)
    return parsed


def message_text(message: dict[str, Any]) -> str:
    """The text parts of an assistant message, joined. Pure."""
    content = message.get("content")
    parts = content if isinstance(content, list) else []
    return "".join(
        p["text"]
        for p in parts
        if isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
    )


class PiHost:
    """The adapter of ``--host-kind pi``."""

    kind = HostKind.PI
    # The versions the realhosts suite ran and tests/realhosts/captures/ recorded.
    tested_versions: ClassVar[tuple[str, ...]] = ("0.73.1",)
    # What `prepare` relies on, looked for in `pi --help` by the canary.
    help_argv: ClassVar[tuple[str, ...]] = ("--help",)
    help_flags: ClassVar[tuple[str, ...]] = ("--print", "--mode", "--session")

    def prepare(self, goal: Goal, envelope: Envelope) -> HostInvocation:
        """``pi -p --mode json [--session ID] ...`` with the prompt on stdin.

        ``goal.host.argv`` adds flags (``--provider``, ``--model``, ``--tools``,
        ``--thinking``) and may name the program first. pi keeps its sessions
        per working directory: the turn runner starts it in the goal's workdir.

        Raises:
            HostMissingError: the pi program is not on PATH.

        """
        program = require_program(goal.host)
        _, extra = split_program(goal.host)
        resume = session_to_resume(goal, envelope.state.host_session)
        argv = [program, "-p", "--mode", "json"]
        if resume is not None:
            argv += ["--session", resume.session_id]
        argv += extra
        prompt = build_prompt(envelope, resumed=resume is not None)
        return HostInvocation(argv=argv, stdin=prompt.encode())

    def interpret(self, envelope: Envelope, output: HostOutput) -> Interpretation:
        """The result in pi's last assistant message, or a typed failure. Pure."""
        parsed = parse_events(output.stdout)
        previous = envelope.state.host_session
        session: HostSession | None = previous
        if parsed.session_id is not None:
            session = session_after_turn(self.kind, previous, parsed.session_id)
        outcome = _outcome(envelope, output, parsed)
        if parsed.session_id is None and diagnose(output.stderr) is Diagnosis.SESSION_MISSING:
            session = no_session(self.kind)
        return Interpretation.of(
            outcome,
            session=session,
            input_tokens=parsed.input_tokens,
            output_tokens=parsed.output_tokens,
            cost_usd=parsed.cost_usd,
        )


def _from_error(message: str, envelope: Envelope) -> HostResult | TurnFailure:
    status_match = _STATUS_FIRST.match(message)
    status = int(status_match.group(1)) if status_match else None
    diagnosis = diagnose(message)
    if status == HTTP_TOO_MANY_REQUESTS or (
        status not in AUTH_STATUSES and diagnosis is Diagnosis.RATE_LIMIT
    ):
        return rate_limited("pi", message, envelope)
    if status in AUTH_STATUSES:
        return failure_for("pi", f"{message} (HTTP {status})", default=FailureReason.HOST_AUTH)
    if is_server_status(status) or diagnosis is Diagnosis.SERVER_ERROR:
        return server_error("pi", message, envelope)
    if diagnosis is Diagnosis.UNREACHABLE:
        return unreachable("pi", message, envelope)
    return failure_for("pi", message, default=FailureReason.HOST_EXECUTION_ERROR)


def _outcome(envelope: Envelope, output: HostOutput, parsed: PiEvents) -> HostResult | TurnFailure:
    last = parsed.last_assistant
    if last is None:
        return _without_answer(envelope, output, parsed)
    reason = last.get("stopReason")
    if reason == "error":
        error = last.get("errorMessage")
        return _from_error(error if isinstance(error, str) else "pi reported an error", envelope)
    if reason == "aborted":
        return TurnFailure.of(FailureReason.HOST_EXECUTION_ERROR, "pi: the run was aborted")
    text = message_text(last)
    if not text.strip():
        return TurnFailure.of(FailureReason.NO_RESULT, "pi finished without a final text message")
    return parse_result(text, source="pi's final message")


def _without_answer(
    envelope: Envelope, output: HostOutput, parsed: PiEvents
) -> HostResult | TurnFailure:
    """No assistant message: judge by exit status and stderr."""
    stderr = output.stderr.strip()
    if output.exit_code != 0 or output.signal is not None:
        if stderr and diagnose(stderr) is not Diagnosis.OTHER:
            return _from_error(stderr, envelope)
        how = f"signal {output.signal}" if output.signal is not None else f"code {output.exit_code}"
        tail = stderr[-STDERR_TAIL:] or "(no stderr)"
        return TurnFailure.of(FailureReason.HOST_EXIT, f"pi exited with {how}: {tail}")
    return TurnFailure.of(
        FailureReason.MALFORMED_OUTPUT,
        f"pi printed no assistant message ({parsed.events} events, {parsed.junk_lines} other "
        "lines); is this a pi CLI with `--mode json`?",
    )
