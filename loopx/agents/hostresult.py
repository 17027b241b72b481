"""What a finished host run left, read: its outcome, result file and reported usage.

:func:`read_outcome` turns a :class:`~loopx.agents.hostrun.HostRun` into the
journal's :class:`~loopx.turn.journal.HostOutcome` (secrets redacted, the
result file read without blocking, the adapter's reading of it);
:mod:`loopx.agents.execution` runs the host and calls it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Final

from loopx.accounts.windows import UsageWindow
from loopx.agents.hostrun import HostRun
from loopx.agents.hosts import Host, HostOutput, Interpretation
from loopx.agents.hosts.base import SessionRecords
from loopx.agents.hosts.reportedwindows import RECORDS_TAIL_BYTES
from loopx.errors import LoopxError, NotRegularFileError
from loopx.log import get_logger
from loopx.secrets import redact_text
from loopx.storage.files import read_bytes
from loopx.turn.failures import FailureReason, TurnFailure
from loopx.turn.journal import HostOutcome, TurnJournal
from loopx.turn.protocol import Envelope
from loopx.usage import Usage

log = get_logger(__name__)

RESULT_READ_LIMIT: Final = 1024 * 1024 + 1


def _read_result_file(path: Path) -> tuple[str | None, str | None]:
    """The result file's text (None: not written), and why it cannot be used, if it cannot.

    A refused file (a symlink, a FIFO, a device, a directory, unreadable) or
    bytes that are not UTF-8 are reported as such instead of being passed on
    as text that fails to parse as JSON, which hid the reason. The read never
    blocks and reads at most ``RESULT_READ_LIMIT`` bytes, whatever the file
    claims (a FIFO once wedged the agent, a sparse file crashed it).
    """
    try:
        data = read_bytes(path, limit=RESULT_READ_LIMIT)
    except FileNotFoundError:
        return None, None
    except NotRegularFileError as e:
        return None, f"the result path is {e.kind}, not a regular file ({path})"
    except (OSError, LoopxError, MemoryError) as e:
        message = e.message if isinstance(e, LoopxError) else str(e) or type(e).__name__
        return None, f"the result file was refused: {message}"
    try:
        return data.decode("utf-8"), None
    except UnicodeDecodeError as e:
        # A result cut at the read limit may end inside a character: the size check reports it.
        if len(data) == RESULT_READ_LIMIT and e.start >= len(data) - 3:
            return data[: e.start].decode("utf-8"), None
        return data.decode("utf-8", errors="replace"), (
            f"the result file is not UTF-8: byte {e.start} ({data[e.start : e.start + 1]!r})"
        )


def read_outcome(
    host: Host,
    envelope: Envelope,
    journal: TurnJournal,
    run: HostRun,
    *,
    result_file: Path,
    secrets: list[str],
) -> tuple[HostOutcome, Interpretation | None]:
    """The recorded outcome (secrets redacted), and the adapter's reading of it."""
    output = HostOutput(
        exit_code=run.exit_code,
        signal=run.signal,
        stdout=redact_text(run.stdout.text(), secrets),
        stderr=redact_text(run.stderr.text(), secrets),
        stdout_dropped=run.stdout.dropped,
        stderr_dropped=run.stderr.dropped,
    )
    base = {
        **output.model_dump(exclude={"result_file_text"}),
        "attempt": journal.attempt,
        "pid": run.pid or None,
        "killed": run.killed,
        "started_at": run.started_at,
        "ended_at": run.ended_at,
    }
    if run.spawn_error is not None:
        failure = TurnFailure.of(FailureReason.HOST_MISSING, run.spawn_error)
        return HostOutcome.model_validate({**base, "failure": failure}), None
    if run.killed is FailureReason.HOST_STALLED:
        # The session a stalled run was in, for the stall ladder's resume.
        try:
            session = host.interpret(envelope, output).session
        except (LoopxError, ValueError):
            session = None
        return HostOutcome.model_validate({**base, "session": session}), None
    if run.killed is not None:
        return HostOutcome.model_validate(base), None
    text, refused = _read_result_file(result_file)
    base["result_file_text"] = redact_text(text, secrets) if text is not None else None
    if refused is not None and run.exit_code == 0:
        failure = TurnFailure.of(FailureReason.INVALID_RESULT, refused)
        return HostOutcome.model_validate({**base, "failure": failure}), None
    try:
        reading = host.interpret(
            envelope, output.model_copy(update={"result_file_text": base["result_file_text"]})
        )
    except (LoopxError, ValueError) as e:
        failure = TurnFailure.of(
            FailureReason.MALFORMED_OUTPUT,
            f"the {host.kind} adapter could not read the output: {e}",
        )
        return HostOutcome.model_validate({**base, "failure": failure}), None
    update = {"result": reading.result, "failure": reading.failure, "session": reading.session}
    return HostOutcome.model_validate({**base, **update}), reading


def reported_windows(
    host: Host, env: Mapping[str, str], reading: Interpretation | None
) -> list[UsageWindow]:
    """The usage windows the run reported: in its output, or in its CLI's session file.

    A session file that cannot be read costs its windows only (logged): the
    account then knows what it knew before, as without any report.
    """
    if reading is None:
        return []
    if not isinstance(host, SessionRecords):
        return reading.windows
    try:
        path = host.records_file(env, reading)
        text = _tail(path) if path is not None else ""
    except OSError as e:
        log.warning("session_records_unreadable", error=str(e))
        return reading.windows
    return [*reading.windows, *host.windows_in(text)]


def _tail(path: Path) -> str:
    """The last ``RECORDS_TAIL_BYTES`` of a session file, from its first whole line."""
    with path.open("rb") as f:
        size = f.seek(0, 2)
        start = max(0, size - RECORDS_TAIL_BYTES)
        f.seek(start)
        data = f.read(RECORDS_TAIL_BYTES)
    if start > 0:
        data = data.partition(b"\n")[2]
    return data.decode("utf-8", errors="replace")


def tampered_outcome(outcome: HostOutcome, tampered: list[str], goal_id: str) -> HostOutcome:
    """The outcome failed ``root_tampered`` when the host changed LoopX's files."""
    if not tampered:
        return outcome
    log.warning("host_tampered_with_root", files=tampered)
    failure = TurnFailure.of(
        FailureReason.ROOT_TAMPERED,
        f"the host changed LoopX's files while it ran: {', '.join(tampered[:10])}; "
        "they were left as found: see `loopx doctor` and "
        f"`loopx replay {goal_id} --verify` (`--repair` rebuilds them from the journals)",
    )
    return outcome.model_copy(update={"failure": failure})


def with_tokens(usage: Usage, reading: Interpretation | None) -> Usage:
    """The measured usage with the tokens and cost the host reported, if it did."""
    if reading is None:
        return usage
    return usage.model_copy(
        update={
            "input_tokens": reading.input_tokens,
            "output_tokens": reading.output_tokens,
            "cost_usd": reading.cost_usd,
        }
    )
