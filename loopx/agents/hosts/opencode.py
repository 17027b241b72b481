"""The ``opencode`` host: OpenCode run as ``opencode run --format json``, the prompt on stdin.

One turn is one ``opencode run`` (``--session <id>`` continues the goal's
session). With ``--format json`` OpenCode 1.18 prints one JSON event a line on
stdout, each with ``type``, ``timestamp`` and ``sessionID``: ``step_start``,
``text`` (``part.text``: the assistant's text of that step), ``tool_use``,
``reasoning``, ``step_finish`` (``part.tokens``: ``input``, ``output``,
``reasoning``, ``cache.read``, ``cache.write``; ``part.cost`` in USD, per step)
and ``error`` (``error.name``, ``error.data.message``, ``error.data.statusCode``;
the run then exits 1). A model call that may succeed later (429, 5xx, no
connection) is retried by OpenCode without end and without an event; with
``--print-logs --log-level ERROR`` each failed attempt is one ``level=ERROR``
``stream error`` line on stderr, which the stall watch and the diagnosis read.
A session it cannot find is ``Error: Session not found`` on stderr, exit 1.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
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
from loopx.agents.hosts.stallwatch import DEFAULT_UNREACHABLE_AFTER_S, StallWatch
from loopx.registry.goalrecords import Goal, HostKind
from loopx.registry.hostprogram import require_program, split_program
from loopx.state import HostSession
from loopx.turn.failures import FailureReason, TurnFailure
from loopx.turn.protocol import Envelope, HostResult

STDERR_TAIL: Final = 400
# What OpenCode 1.18 logs at level ERROR for each failed model call it will retry.
RETRY_LINE: Final = r'level=ERROR .*message="stream error"'
_STREAM_ERROR: Final = re.compile(r'message="stream error".*?error\.error="([^"]*)"')
_ANSI: Final = re.compile(r"\x1b\[[0-9;]*m")


@dataclass
class OpencodeEvents:
    """What an ``opencode run --format json`` stdout said, parsed leniently."""

    session_id: str | None = None
    texts: list[str] = field(default_factory=list)  # the text parts, in order
    error: dict[str, Any] | None = None  # the last error event's ``error``
    steps_finished: int = 0
    last_finish_reason: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    events: int = 0
    junk_lines: int = 0


def _on_event(parsed: OpencodeEvents, event: dict[str, Any]) -> None:
    if isinstance(event.get("sessionID"), str) and event["sessionID"]:
        parsed.session_id = parsed.session_id or event["sessionID"]
    part = event.get("part")
    part = part if isinstance(part, dict) else {}
    kind = event["type"]
    if kind == "text" and isinstance(part.get("text"), str):
        parsed.texts.append(part["text"])
    elif kind == "step_finish":
        parsed.steps_finished += 1
        reason = part.get("reason")
        parsed.last_finish_reason = reason if isinstance(reason, str) else None
        tokens = part.get("tokens")
        tokens = tokens if isinstance(tokens, dict) else {}
        cache = tokens.get("cache")
        cache = cache if isinstance(cache, dict) else {}
        parsed.input_tokens += sum(
            reported_count(v) for v in (tokens.get("input"), cache.get("read"), cache.get("write"))
        )
        parsed.output_tokens += reported_count(tokens.get("output")) + reported_count(
            tokens.get("reasoning")
        )
        cost = part.get("cost")
        if isinstance(cost, int | float) and cost >= 0:
            parsed.cost_usd += float(cost)
    elif kind == "error" and isinstance(event.get("error"), dict):
        parsed.error = event["error"]


def parse_events(stdout: str) -> OpencodeEvents:
    """Read an ``opencode run --format json`` stdout. Pure; unknown events are skipped."""
    parsed = OpencodeEvents()
    events, parsed.junk_lines = typed_events(stdout)
    parsed.events = len(events)
    for event in events:
        _on_event(parsed, event)
    return parsed


class OpencodeHost:
    """The adapter of ``--host-kind opencode``."""

    kind = HostKind.OPENCODE
    # The versions the realhosts suite ran and tests/realhosts/captures/ recorded.
    tested_versions: ClassVar[tuple[str, ...]] = ("1.18.33",)
    # What `prepare` relies on, looked for in `opencode run --help` by the canary.
    help_argv: ClassVar[tuple[str, ...]] = ("run", "--help")
    help_flags: ClassVar[tuple[str, ...]] = (
        "--format",
        "--print-logs",
        "--log-level",
        "--session",
        "--dir",
    )

    def prepare(self, goal: Goal, envelope: Envelope) -> HostInvocation:
        """``opencode run --format json --print-logs --log-level ERROR --dir W [--session ID] ...``.

        The prompt goes on stdin. ``goal.host.argv`` adds flags (``--model
        provider/model``, ``--agent``, ``--auto``) and may name the program
        first. OpenCode works in its current directory: the turn runner starts
        it in the goal's workdir.

        Raises:
            HostMissingError: the opencode program is not on PATH.

        """
        program = require_program(goal.host)
        _, extra = split_program(goal.host)
        resume = session_to_resume(goal, envelope.state.host_session)
        argv = [program, "run", "--format", "json", "--print-logs", "--log-level", "ERROR"]
        # OpenCode 1.18 takes its directory from $PWD before its cwd: an agent started from a
        # shell elsewhere would edit (and commit in) the shell's directory.
        argv += ["--dir", envelope.workdir]
        if resume is not None:
            argv += ["--session", resume.session_id]
        argv += extra
        prompt = build_prompt(envelope, resumed=resume is not None)
        stall = StallWatch(
            pattern=RETRY_LINE,
            after_s=goal.host.unreachable_after_s or DEFAULT_UNREACHABLE_AFTER_S,
        )
        return HostInvocation(
            argv=argv, stdin=prompt.encode(), env={"PWD": envelope.workdir}, stall=stall
        )

    def interpret(self, envelope: Envelope, output: HostOutput) -> Interpretation:
        """The result in OpenCode's last text part, or a typed failure. Pure."""
        parsed = parse_events(output.stdout)
        previous = envelope.state.host_session
        session: HostSession | None = previous
        if parsed.session_id is not None:
            session = session_after_turn(self.kind, previous, parsed.session_id)
        outcome = _outcome(envelope, output, parsed)
        if isinstance(outcome, TurnFailure) and diagnose(outcome.message) is (
            Diagnosis.SESSION_MISSING
        ):
            session = no_session(self.kind)
        return Interpretation.of(
            outcome,
            session=session,
            input_tokens=parsed.input_tokens,
            output_tokens=parsed.output_tokens,
            cost_usd=parsed.cost_usd,
        )


def _from_error(message: str, envelope: Envelope, status: object) -> HostResult | TurnFailure:
    diagnosis = diagnose(message)
    if status == HTTP_TOO_MANY_REQUESTS or (
        status not in AUTH_STATUSES and diagnosis is Diagnosis.RATE_LIMIT
    ):
        return rate_limited("opencode", message, envelope)
    if status in AUTH_STATUSES:
        text = f"{message} (HTTP {status})"
        return failure_for("opencode", text, default=FailureReason.HOST_AUTH)
    if is_server_status(status) or diagnosis is Diagnosis.SERVER_ERROR:
        return server_error("opencode", message, envelope)
    if diagnosis is Diagnosis.UNREACHABLE:
        return unreachable("opencode", message, envelope)
    return failure_for("opencode", message, default=FailureReason.HOST_EXECUTION_ERROR)


def _error_event(error: dict[str, Any]) -> tuple[str, object]:
    """(message, HTTP status) of an ``error`` event's ``error``."""
    data = error.get("data")
    data = data if isinstance(data, dict) else {}
    message = data.get("message")
    text = message if isinstance(message, str) and message else str(error.get("name", "error"))
    return text, data.get("statusCode")


def _outcome(
    envelope: Envelope, output: HostOutput, parsed: OpencodeEvents
) -> HostResult | TurnFailure:
    if parsed.error is not None:
        message, status = _error_event(parsed.error)
        return _from_error(message, envelope, status)
    if parsed.steps_finished == 0 or output.exit_code != 0 or output.signal is not None:
        return _without_answer(envelope, output, parsed)
    text = parsed.texts[-1] if parsed.texts else ""
    if not text.strip():
        return TurnFailure.of(
            FailureReason.NO_RESULT, "opencode finished without a final text message"
        )
    return parse_result(text, source="opencode's final message")


def stream_errors(stderr: str) -> list[str]:
    """The messages of the ``stream error`` lines OpenCode logged, in order. Pure."""
    return [m.group(1) for m in _STREAM_ERROR.finditer(stderr)]


def _without_answer(
    envelope: Envelope, output: HostOutput, parsed: OpencodeEvents
) -> HostResult | TurnFailure:
    """No error event and no finished step: judge by the logged errors, then exit status."""
    retried = stream_errors(output.stderr)
    if retried:
        return _from_error(retried[-1], envelope, None)
    stderr = _ANSI.sub("", output.stderr).strip()
    if output.exit_code != 0 or output.signal is not None:
        if stderr and diagnose(stderr) is not Diagnosis.OTHER:
            return _from_error(stderr, envelope, None)
        how = f"signal {output.signal}" if output.signal is not None else f"code {output.exit_code}"
        tail = stderr[-STDERR_TAIL:] or "(no stderr)"
        return TurnFailure.of(FailureReason.HOST_EXIT, f"opencode exited with {how}: {tail}")
    return TurnFailure.of(
        FailureReason.MALFORMED_OUTPUT,
        f"opencode printed no finished step ({parsed.events} events, {parsed.junk_lines} other "
        "lines); is this an opencode CLI with `run --format json`?",
    )
