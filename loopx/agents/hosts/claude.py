"""The ``claude`` host: Claude Code run as ``claude -p --output-format stream-json --verbose``.

One turn is one print-mode run with the prompt on stdin (``--resume
<session_id>`` continues the goal's session). It streams one JSON object a
line while it works (``type: "system"``, ``subtype: "init"`` first, with the
``session_id``; then ``assistant``, ``user`` messages): the sign of life the
stall watch needs. When it ends, Claude Code prints the last line, the result
object: ``type: "result"``, ``subtype`` (``success``,
``error_max_turns``, ``error_during_execution``, ``error_max_budget_usd``,
``error_max_structured_output_retries``), ``is_error``, ``result`` (the final
text; absent on error subtypes, which carry ``errors``), ``session_id``,
``total_cost_usd``, ``usage`` (``input_tokens``, ``output_tokens``,
``cache_creation_input_tokens``, ``cache_read_input_tokens``), ``modelUsage``
(per model), ``num_turns`` and, in newer versions, ``api_error_status`` and
``structured_output``. ``usage`` is the run's own; from 2.1.332 on
``total_cost_usd`` and ``modelUsage`` cover the whole resumed session, and the
run's cost is their increase (:func:`~loopx.agents.hosts.session.turn_cost`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Final

from pydantic import ValidationError

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
from loopx.agents.hosts.reportedwindows import claude_windows
from loopx.agents.hosts.resettime import host_zone
from loopx.agents.hosts.session import (
    no_session,
    session_after_turn,
    session_to_resume,
    turn_cost,
)
from loopx.registry.goalrecords import Goal, HostKind
from loopx.registry.hostprogram import require_program, split_program
from loopx.state import HostSession
from loopx.storage.files import describe_validation_error
from loopx.turn.failures import FailureReason, TurnFailure
from loopx.turn.protocol import Envelope, HostResult

STDERR_TAIL: Final = 400


def find_result_object(stdout: str) -> dict[str, Any] | None:
    """The ``type: "result"`` object Claude Code printed last, or None. Pure.

    Normally stdout is exactly that object; a line-by-line scan from the end
    tolerates a warning printed before it (and stream-json output).
    """
    candidates = [stdout.strip(), *reversed(stdout.splitlines())]
    for text in candidates:
        line = text.strip()
        if not line.startswith("{"):
            continue
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict) and value.get("type") == "result":
            return value
    return None


def stream_session_id(stdout: str) -> str | None:
    """The ``session_id`` of the stream's ``system``/``init`` event, or None. Pure."""
    for raw in stdout.splitlines():
        line = raw.strip()
        if not line.startswith("{"):
            continue
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict) and value.get("type") == "system":
            session_id = value.get("session_id")
            if isinstance(session_id, str) and session_id:
                return session_id
    return None


def reported_usage(payload: dict[str, Any]) -> tuple[int, int, float]:
    """(input tokens, output tokens, cost in USD) of one run. Pure.

    Input counts every prompt token the model read: fresh, written to and
    read from the prompt cache (the API reports them apart).
    """
    usage = payload.get("usage")
    usage = usage if isinstance(usage, dict) else {}
    tokens_in = sum(
        reported_count(usage.get(key))
        for key in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
    )
    cost = payload.get("total_cost_usd", payload.get("cost_usd"))
    cost_usd = float(cost) if isinstance(cost, int | float) and cost >= 0 else 0.0
    return tokens_in, reported_count(usage.get("output_tokens")), cost_usd


def model_usage_tokens(payload: dict[str, Any]) -> int | None:
    """Every token ``modelUsage`` counts, summed over its models; None without it. Pure."""
    models = payload.get("modelUsage")
    if not isinstance(models, dict):
        return None
    keys = ("inputTokens", "outputTokens", "cacheReadInputTokens", "cacheCreationInputTokens")
    return sum(
        reported_count(model.get(key))
        for model in models.values()
        if isinstance(model, dict)
        for key in keys
    )


def _error_text(payload: dict[str, Any]) -> str:
    errors = payload.get("errors")
    parts = [e for e in errors if isinstance(e, str)] if isinstance(errors, list) else []
    result = payload.get("result")
    if isinstance(result, str) and result.strip():
        parts.insert(0, result)
    return "; ".join(parts) or f"claude reported {payload.get('subtype', 'an error')}"


class ClaudeHost:
    """The adapter of ``--host-kind claude``."""

    kind = HostKind.CLAUDE
    # The versions the realhosts suite ran and tests/realhosts/captures/ recorded.
    tested_versions: ClassVar[tuple[str, ...]] = ("2.1.197", "2.1.332")
    # What `prepare` relies on, looked for in `claude --help` by the canary.
    help_argv: ClassVar[tuple[str, ...]] = ("--help",)
    help_flags: ClassVar[tuple[str, ...]] = ("--print", "--output-format", "--resume")

    def prepare(self, goal: Goal, envelope: Envelope) -> HostInvocation:
        """``claude -p --output-format stream-json --verbose [--resume ID] ...``, prompt on stdin.

        ``goal.host.argv`` adds flags (``--model``, ``--max-turns``,
        ``--permission-mode``, ``--allowedTools``) and may name the program
        first. Claude Code works in its current directory: the turn runner
        starts it in the goal's workdir.

        Raises:
            HostMissingError: the claude program is not on PATH.

        """
        program = require_program(goal.host)
        _, extra = split_program(goal.host)
        resume = session_to_resume(goal, envelope.state.host_session)
        argv = [program, "-p", "--output-format", "stream-json", "--verbose"]
        if resume is not None:
            argv += ["--resume", resume.session_id]
        argv += extra
        prompt = build_prompt(envelope, resumed=resume is not None)
        return HostInvocation(argv=argv, stdin=prompt.encode(), streams=True)

    def activity_paths(self, env: Mapping[str, str]) -> list[str]:
        """``$CLAUDE_CONFIG_DIR/projects``: Claude Code appends each message to its transcript."""
        home = env.get("CLAUDE_CONFIG_DIR") or (
            str(Path(env["HOME"]) / ".claude") if "HOME" in env else ""
        )
        return [str(Path(home) / "projects")] if home else []

    def interpret(self, envelope: Envelope, output: HostOutput) -> Interpretation:
        """The result in Claude Code's final JSON, or a typed failure. Pure."""
        previous = envelope.state.host_session
        windows = claude_windows(output.stdout)
        payload = find_result_object(output.stdout)
        session: HostSession | None = previous
        if payload is None:
            failure = _without_payload(envelope, output)
            started = stream_session_id(output.stdout)
            if diagnose(output.stderr) is Diagnosis.SESSION_MISSING:
                session = no_session(self.kind)
            elif started is not None:  # a run cut short: the session it began or resumed
                session = session_after_turn(self.kind, previous, started)
            return Interpretation.of(failure, session=session, windows=windows)
        tokens_in, tokens_out, reported_cost = reported_usage(payload)
        cost = reported_cost
        session_id = payload.get("session_id")
        if isinstance(session_id, str) and session_id:
            model_tokens = model_usage_tokens(payload)
            run_tokens = tokens_in + tokens_out
            cost = turn_cost(
                self.kind, previous, session_id, reported_cost, run_tokens, model_tokens
            )
            session = session_after_turn(
                self.kind,
                previous,
                session_id,
                reported_cost_usd=reported_cost,
                reported_model_tokens=model_tokens,
            )
        outcome = _outcome(envelope, payload)
        if (
            isinstance(outcome, TurnFailure)
            and diagnose(_error_text(payload)) is Diagnosis.SESSION_MISSING
        ):
            session = no_session(self.kind)
        return Interpretation.of(
            outcome,
            session=session,
            input_tokens=tokens_in,
            output_tokens=tokens_out,
            cost_usd=cost,
            windows=windows,
        )


def _from_error(
    message: str, envelope: Envelope, *, status: object = None
) -> HostResult | TurnFailure:
    if status == HTTP_TOO_MANY_REQUESTS or (
        status not in AUTH_STATUSES and diagnose(message) is Diagnosis.RATE_LIMIT
    ):
        return rate_limited("claude", message, envelope, host_zone())
    if status is None and diagnose(message) is Diagnosis.UNREACHABLE:
        return unreachable("claude", message, envelope)
    if is_server_status(status) or (status is None and diagnose(message) is Diagnosis.SERVER_ERROR):
        return server_error("claude", message, envelope)
    if status in AUTH_STATUSES:
        message = f"{message} (HTTP {status}, authentication_error)"
    return failure_for("claude", message, default=FailureReason.HOST_EXECUTION_ERROR)


def _outcome(  # noqa: PLR0911 - one return per documented subtype
    envelope: Envelope, payload: dict[str, Any]
) -> HostResult | TurnFailure:
    subtype = payload.get("subtype")
    turns = payload.get("num_turns")
    if subtype == "error_max_turns":
        return TurnFailure.of(
            FailureReason.HOST_MAX_TURNS,
            f"claude stopped at its turn limit after {turns} turns (--max-turns); "
            "raise it in the goal's host flags or split the work",
        )
    if subtype == "error_max_budget_usd":
        return TurnFailure.of(
            FailureReason.HOST_EXECUTION_ERROR,
            f"claude stopped at its --max-budget-usd after {turns} turns: {_error_text(payload)}",
        )
    if subtype == "error_max_structured_output_retries":
        return TurnFailure.of(
            FailureReason.INVALID_RESULT,
            f"claude could not produce output matching --json-schema: {_error_text(payload)}",
        )
    if payload.get("is_error") is True or (
        isinstance(subtype, str) and subtype.startswith("error")
    ):
        return _from_error(_error_text(payload), envelope, status=payload.get("api_error_status"))
    structured = payload.get("structured_output")
    if isinstance(structured, dict):
        try:
            return HostResult.model_validate({k: v for k, v in structured.items() if v is not None})
        except ValidationError as e:
            return TurnFailure.of(
                FailureReason.INVALID_RESULT,
                f"claude's structured_output is not a valid result: {describe_validation_error(e)}",
            )
    text = payload.get("result")
    if not isinstance(text, str) or not text.strip():
        return TurnFailure.of(FailureReason.NO_RESULT, "claude finished without a final message")
    return parse_result(text, source="claude's final message")


def _without_payload(envelope: Envelope, output: HostOutput) -> HostResult | TurnFailure:
    """No result object on stdout: judge by exit status and stderr."""
    stderr = output.stderr.strip()
    if output.exit_code != 0 or output.signal is not None:
        if stderr and diagnose(stderr) is not Diagnosis.OTHER:
            return _from_error(stderr, envelope)
        how = f"signal {output.signal}" if output.signal is not None else f"code {output.exit_code}"
        tail = (stderr or output.stdout.strip())[-STDERR_TAIL:] or "(no output)"
        return TurnFailure.of(FailureReason.HOST_EXIT, f"claude exited with {how}: {tail}")
    excerpt = output.stdout.strip()[:200] or "(empty)"
    return TurnFailure.of(
        FailureReason.MALFORMED_OUTPUT,
        "claude printed no result object (is --output-format stream-json in effect?); "
        "stdout begins: "
        f"{excerpt!r}",
    )
