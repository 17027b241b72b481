"""The ``gemini`` host: Google's Gemini CLI run as ``gemini --output-format json --prompt ""``.

One turn is one headless run with the prompt on stdin (``--prompt ""`` is
appended to it; ``--resume <session_id>`` continues the goal's session).
Gemini CLI 0.61 prints one JSON object when it ends: on success, on stdout,
``session_id``, ``response`` (the final text) and ``stats.models.<model>.
tokens`` (``prompt``, ``candidates``, ``cached``, ``thoughts``, per model,
its own router's calls included); on failure, on **stderr** after a stack
trace, ``session_id`` and ``error`` (``type``, ``message``, ``code``: the
HTTP status for API errors, and the exit code is that status modulo 256).
A lost session is one stderr line (``Error resuming session: ...``, exit 42).
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta
from typing import Any, ClassVar, Final
from zoneinfo import ZoneInfo

from loopx.accounts.windows import UsageWindow
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
    turn_started_at,
    unreachable,
)
from loopx.agents.hosts.extract import parse_result
from loopx.agents.hosts.prompt import build_prompt
from loopx.agents.hosts.reportedwindows import spent_window
from loopx.agents.hosts.session import no_session, session_after_turn, session_to_resume
from loopx.agents.hosts.stallwatch import DEFAULT_UNREACHABLE_AFTER_S, StallWatch
from loopx.registry.goalrecords import Goal, HostKind
from loopx.registry.hostprogram import require_program, split_program
from loopx.state import HostSession
from loopx.turn.failures import FailureReason, TurnFailure
from loopx.turn.protocol import Envelope, HostResult

STDERR_TAIL: Final = 400
# What Gemini CLI 0.61 prints, and its stack trace, while it retries a server it cannot reach
# (10 attempts, 5-30 s apart, unless settings.json's general.maxAttempts says fewer).
RETRY_LINES: Final = (
    r"^Attempt \d+ failed\. Retrying with backoff\.\.\. Error: exception TypeError: fetch failed"
    r"|^at \S"
)
# The Gemini API's per-day quotas reset at midnight Pacific time; the CLI drops the reset time.
DAILY_QUOTA: Final = re.compile(r"exhausted your daily quota", re.IGNORECASE)
QUOTA_ZONE: Final = ZoneInfo("America/Los_Angeles")
_SESSION_ERROR: Final = re.compile(r"^Error resuming session: .*", re.MULTILINE)


def find_json_report(text: str) -> dict[str, Any] | None:
    """The last JSON object Gemini CLI printed in ``text`` (stdout or stderr), or None. Pure.

    The object is pretty-printed and starts at a line that is ``{`` alone;
    what comes before it (warnings, a stack trace) is skipped.
    """
    starts = [m.start() for m in re.finditer(r"^\{\s*$", text, re.MULTILINE)]
    for start in reversed(starts):
        try:
            value = json.loads(text[start:])
        except ValueError:
            continue
        if isinstance(value, dict) and ("response" in value or "error" in value):
            return value
    return None


def reported_tokens(payload: dict[str, Any]) -> tuple[int, int]:
    """(input, output) tokens of one run, summed over every model it called. Pure.

    Input is every prompt token read (``prompt`` includes the cached ones);
    output is the answer's plus the model's thinking (``candidates`` + ``thoughts``).
    """
    stats = payload.get("stats")
    models = stats.get("models") if isinstance(stats, dict) else None
    tokens_in = tokens_out = 0
    for model in (models or {}).values() if isinstance(models, dict) else []:
        tokens = model.get("tokens") if isinstance(model, dict) else None
        if isinstance(tokens, dict):
            tokens_in += reported_count(tokens.get("prompt", tokens.get("input")))
            tokens_out += reported_count(tokens.get("candidates")) + reported_count(
                tokens.get("thoughts")
            )
    return tokens_in, tokens_out


def _error_of(payload: dict[str, Any]) -> tuple[str, object]:
    """(message, code) of a report's ``error``; an API error's message is Google's JSON."""
    error = payload.get("error")
    error = error if isinstance(error, dict) else {}
    message = str(error.get("message") or "gemini reported an error")
    code = error.get("code")
    try:
        inner = json.loads(message)
    except ValueError:
        return message, code
    if isinstance(inner, dict) and isinstance(inner.get("error"), dict):
        api = inner["error"]
        status = f" ({api['status']})" if api.get("status") else ""
        message = f"{api.get('message', message)}{status}"
        code = api.get("code", code)
    return message, code


def daily_quota(message: str, envelope: Envelope) -> HostResult:
    """The ``wait`` until the next midnight Pacific time, when Gemini API daily quotas reset."""
    started = turn_started_at(envelope)
    local = started.astimezone(QUOTA_ZONE)
    midnight = datetime(local.year, local.month, local.day, tzinfo=QUOTA_ZONE) + timedelta(days=1)
    seconds = int((midnight - started).total_seconds())
    return rate_limited("gemini", f"{message} (resets in {seconds} seconds)", envelope)


def _from_error(message: str, code: object, envelope: Envelope) -> HostResult | TurnFailure:
    diagnosis = diagnose(message)
    if code == HTTP_TOO_MANY_REQUESTS or diagnosis is Diagnosis.RATE_LIMIT:
        if DAILY_QUOTA.search(message):
            return daily_quota(message, envelope)
        return rate_limited("gemini", message, envelope)
    if code in AUTH_STATUSES:
        text = f"{message} (HTTP {code}, unauthenticated)"
        return failure_for("gemini", text, default=FailureReason.HOST_AUTH)
    if is_server_status(code):
        return server_error("gemini", f"HTTP {code}: {message}", envelope)
    if diagnosis is Diagnosis.UNREACHABLE:
        return unreachable("gemini", message, envelope)
    return failure_for("gemini", message, default=FailureReason.HOST_EXECUTION_ERROR)


class GeminiHost:
    """The adapter of ``--host-kind gemini``."""

    kind = HostKind.GEMINI
    # The versions the realhosts suite ran and tests/realhosts/captures/ recorded.
    tested_versions: ClassVar[tuple[str, ...]] = ("0.61.0",)
    # What `prepare` relies on, looked for in `gemini --help` by the canary.
    help_argv: ClassVar[tuple[str, ...]] = ("--help",)
    help_flags: ClassVar[tuple[str, ...]] = ("--output-format", "--resume", "--prompt")

    def prepare(self, goal: Goal, envelope: Envelope) -> HostInvocation:
        """``gemini --output-format json [--resume ID] ... --prompt ""``, the prompt on stdin.

        ``goal.host.argv`` adds flags (``--model``, ``--approval-mode yolo``,
        ``--sandbox``) and may name the program first. Gemini CLI keeps its
        sessions per project directory: the turn runner starts it in the
        goal's workdir.

        Raises:
            HostMissingError: the gemini program is not on PATH.

        """
        program = require_program(goal.host)
        _, extra = split_program(goal.host)
        resume = session_to_resume(goal, envelope.state.host_session)
        argv = [program, "--output-format", "json"]
        if resume is not None:
            argv += ["--resume", resume.session_id]
        # `--prompt ""` is headless mode with the prompt read from stdin (it is appended to it).
        argv += [*extra, "--prompt", ""]
        prompt = build_prompt(envelope, resumed=resume is not None)
        stall = StallWatch(
            pattern=RETRY_LINES,
            after_s=goal.host.unreachable_after_s or DEFAULT_UNREACHABLE_AFTER_S,
        )
        return HostInvocation(argv=argv, stdin=prompt.encode(), stall=stall)

    def interpret(self, envelope: Envelope, output: HostOutput) -> Interpretation:
        """The result in Gemini CLI's JSON report, or a typed failure. Pure."""
        previous = envelope.state.host_session
        payload = find_json_report(output.stdout) or find_json_report(output.stderr)
        if payload is None:
            lost = _SESSION_ERROR.search(output.stderr)
            if lost is not None:
                failure = failure_for(
                    "gemini", lost.group(0), default=FailureReason.HOST_EXECUTION_ERROR
                )
                return Interpretation.of(failure, session=no_session(self.kind))
            return Interpretation.of(_without_report(envelope, output), session=previous)
        tokens_in, tokens_out = reported_tokens(payload)
        session_id = payload.get("session_id")
        session: HostSession | None = previous
        if isinstance(session_id, str) and session_id:
            session = session_after_turn(self.kind, previous, session_id)
        outcome = _outcome(envelope, payload)
        return Interpretation.of(
            outcome,
            session=session,
            input_tokens=tokens_in,
            output_tokens=tokens_out,
            windows=_spent_daily(outcome, envelope),
        )


def _spent_daily(outcome: HostResult | TurnFailure, envelope: Envelope) -> list[UsageWindow]:
    """The daily window at 100% when the turn met Gemini's daily quota (reset: the wait's end)."""
    if not isinstance(outcome, HostResult) or not DAILY_QUOTA.search(outcome.summary or ""):
        return []
    resets = turn_started_at(envelope) + timedelta(seconds=outcome.wait_seconds or 0)
    return spent_window("daily", resets)


def _outcome(envelope: Envelope, payload: dict[str, Any]) -> HostResult | TurnFailure:
    if "error" in payload and payload["error"] is not None:
        message, code = _error_of(payload)
        return _from_error(message, code, envelope)
    text = payload.get("response")
    if not isinstance(text, str) or not text.strip():
        return TurnFailure.of(FailureReason.NO_RESULT, "gemini finished without a final message")
    return parse_result(text, source="gemini's final message")


def _without_report(envelope: Envelope, output: HostOutput) -> HostResult | TurnFailure:
    """No JSON report: judge by stderr and exit status.

    Stopped by the stall watch while retrying, Gemini CLI 0.61 handles SIGTERM and
    exits 0 without a report; its retry lines still say why.
    """
    stderr = output.stderr.strip()
    lines = [line for line in stderr.splitlines() if not line.strip().startswith("at ")]
    tail = "\n".join(lines)[-STDERR_TAIL:]
    if tail and diagnose(tail) is not Diagnosis.OTHER:
        return _from_error(tail, None, envelope)
    if output.exit_code != 0 or output.signal is not None:
        how = f"signal {output.signal}" if output.signal is not None else f"code {output.exit_code}"
        return TurnFailure.of(
            FailureReason.HOST_EXIT, f"gemini exited with {how}: {tail or '(no output)'}"
        )
    excerpt = output.stdout.strip()[:200] or "(empty)"
    return TurnFailure.of(
        FailureReason.MALFORMED_OUTPUT,
        f"gemini printed no JSON report (is --output-format json in effect?); stdout begins: "
        f"{excerpt!r}",
    )
