"""Reading a host's result per docs/host-protocol.md: result file first, last stdout line second."""

from __future__ import annotations

import json
import signal
from typing import Any, Final

from pydantic import ValidationError

from loopx import environ
from loopx.agents.hosts.base import HostOutput, Interpretation
from loopx.storage.files import describe_validation_error
from loopx.turn.failures import FailureReason, TurnFailure
from loopx.turn.protocol import HostResult

RESULT_LIMIT_BYTES: Final = 256 * 1024  # a result larger than this is refused, not truncated
_STDERR_TAIL: Final = 400


def describe_exit(exit_code: int | None, sig: int | None) -> str:
    """'exited with code 3' or 'was killed by signal SIGKILL'. Pure."""
    if sig is not None:
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = str(sig)
        return f"was killed by signal {name}"
    return f"exited with code {exit_code}"


def typed_events(stdout: str) -> tuple[list[dict[str, Any]], int]:
    """A JSON-lines stdout's objects with a string ``type``, in order, and its other lines. Pure.

    The count is of the other non-blank lines (not JSON, or no ``type``).
    """
    events: list[dict[str, Any]] = []
    junk = 0
    for raw in stdout.splitlines():
        line = raw.strip()
        if not line:
            continue
        try:
            event = json.loads(line)
        except ValueError:
            event = None
        if isinstance(event, dict) and isinstance(event.get("type"), str):
            events.append(event)
        else:
            junk += 1
    return events, junk


def _last_json_line(stdout: str) -> str | None:
    for line in reversed(stdout.splitlines()):
        text = line.strip()
        if text:
            return text if text.startswith("{") else None
    return None


def read_protocol_result(output: HostOutput) -> Interpretation:
    """Interpret a protocol-speaking host's output. Pure.

    Order: a non-zero exit is a failure (``host_exit``) whatever was written;
    then the result file; then the last non-empty stdout line if it is a JSON
    object; else ``no_result``.
    """
    if output.exit_code != 0:
        tail = output.stderr.strip()[-_STDERR_TAIL:]
        how = describe_exit(output.exit_code, output.signal)
        message = f"the host {how}" + (f": {tail}" if tail else " without output on stderr")
        return Interpretation(failure=TurnFailure.of(FailureReason.HOST_EXIT, message))
    text = output.result_file_text
    source = environ.RESULT_FILE
    if text is None:
        text = _last_json_line(output.stdout)
        source = "the last stdout line"
    if text is None:
        return Interpretation(
            failure=TurnFailure.of(
                FailureReason.NO_RESULT,
                "the host exited 0 but wrote no result file and no JSON last stdout line",
            )
        )
    if len(text.encode()) > RESULT_LIMIT_BYTES:
        return Interpretation(
            failure=TurnFailure.of(
                FailureReason.INVALID_RESULT,
                f"the result in {source} is {len(text.encode())} bytes, "
                f"more than the {RESULT_LIMIT_BYTES} allowed",
            )
        )
    try:
        result = HostResult.model_validate_json(text)
    except ValidationError as e:
        return Interpretation(
            failure=TurnFailure.of(
                FailureReason.INVALID_RESULT,
                f"the result in {source} is invalid: {describe_validation_error(e)}",
            )
        )
    return Interpretation(result=result)
