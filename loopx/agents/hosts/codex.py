"""The ``codex`` host: OpenAI Codex CLI run as ``codex exec --json``.

One turn is one ``codex exec`` (or ``codex exec resume <thread_id>``) with the
prompt on stdin. Codex prints a JSONL event stream on stdout
(codex-rs/exec/src/exec_events.rs): ``thread.started`` (``thread_id``),
``turn.started``, ``item.*`` (``agent_message`` items carry the text),
``turn.completed`` (``usage``), ``turn.failed`` (``error.message``) and
``error`` (``message``; also emitted for retries that later recover). The
final agent message must be the result JSON; ``--output-schema`` asks the
model to produce exactly that shape and ``--output-last-message`` writes it
to the turn's result file as well.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Final

from loopx.accounts.windows import UsageWindow
from loopx.agents.hosts._parse import typed_events
from loopx.agents.hosts.base import HostInvocation, HostOutput, Interpretation
from loopx.agents.hosts.diagnosis import (
    Diagnosis,
    diagnose,
    failure_for,
    rate_limited,
    reported_count,
    server_error,
    unreachable,
)
from loopx.agents.hosts.extract import parse_result
from loopx.agents.hosts.prompt import build_prompt, strict_result_schema
from loopx.agents.hosts.reportedwindows import SAFE_ID, codex_windows
from loopx.agents.hosts.resettime import host_zone
from loopx.agents.hosts.session import (
    no_session,
    session_after_turn,
    session_to_resume,
    turn_tokens,
)
from loopx.agents.hosts.stallwatch import DEFAULT_UNREACHABLE_AFTER_S, StallWatch
from loopx.registry.goalrecords import Goal, HostKind
from loopx.registry.hostprogram import require_program, split_program
from loopx.root import Layout
from loopx.state import HostSession
from loopx.storage.dirs import ensure_dir
from loopx.storage.files import atomic_write_bytes, read_bytes
from loopx.turn.failures import FailureReason, TurnFailure
from loopx.turn.protocol import Envelope, HostResult

SCHEMA_FILE_NAME: Final = "codex-result.schema.json"
# What codex 0.171 repeats, never exiting, while its model server is unreachable.
RECONNECT_LINE: Final = r"Reconnecting\.\.\. waiting for network"
STDERR_TAIL: Final = 400


@dataclass
class CodexEvents:
    """What a ``codex exec --json`` event stream said, parsed leniently."""

    thread_id: str | None = None
    terminal: str | None = None  # "turn.completed" or "turn.failed", the last one seen
    failure_message: str | None = None
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # item.completed items of type error
    last_message: str | None = None
    input_tokens: int | None = None  # session-cumulative, from turn.completed
    output_tokens: int | None = None
    events: int = 0
    junk_lines: int = 0


def _on_event(parsed: CodexEvents, event: dict[str, Any]) -> None:
    kind = event["type"]
    if kind == "thread.started" and isinstance(event.get("thread_id"), str):
        parsed.thread_id = parsed.thread_id or event["thread_id"]
    elif kind == "turn.completed":
        parsed.terminal, parsed.failure_message = kind, None
        usage = event.get("usage")
        if isinstance(usage, dict):
            parsed.input_tokens = reported_count(usage.get("input_tokens"))
            parsed.output_tokens = reported_count(usage.get("output_tokens"))
    elif kind == "turn.failed":
        error = event.get("error")
        message = error.get("message") if isinstance(error, dict) else None
        parsed.terminal = kind
        parsed.failure_message = message if isinstance(message, str) else "turn failed"
    elif kind == "error" and isinstance(event.get("message"), str):
        parsed.errors.append(event["message"])
    elif kind == "item.completed" and isinstance(event.get("item"), dict):
        _on_item(parsed, event["item"])


def _on_item(parsed: CodexEvents, item: dict[str, Any]) -> None:
    if item.get("type") == "agent_message" and isinstance(item.get("text"), str):
        parsed.last_message = item["text"]
    elif item.get("type") == "error" and isinstance(item.get("message"), str):
        # Codex 0.171 reports non-fatal problems this way ("Model metadata for `m` not
        # found"); the turn goes on, so they are kept as warnings, never as the outcome.
        parsed.warnings.append(item["message"])


def parse_events(stdout: str) -> CodexEvents:
    """Read a ``codex exec --json`` stdout. Pure; unknown events are skipped."""
    parsed = CodexEvents()
    events, parsed.junk_lines = typed_events(stdout)
    parsed.events = len(events)
    for event in events:
        _on_event(parsed, event)
    return parsed


def _schema_file(envelope: Envelope) -> Path:
    """Write the strict result schema once per goal; return its path.

    The schema is a pure function of the code, so the file is rewritten only
    when its bytes differ (an upgrade changed HostResult).
    """
    path = Layout.at(Path(envelope.root)).goal_dir(envelope.goal_id) / SCHEMA_FILE_NAME
    data = (json.dumps(strict_result_schema(), indent=2, sort_keys=True) + "\n").encode()
    ensure_dir(path.parent)
    try:
        current: bytes | None = read_bytes(path)
    except FileNotFoundError:
        current = None
    if current != data:
        atomic_write_bytes(path, data)
    return path


class CodexHost:
    """The adapter of ``--host-kind codex``."""

    kind = HostKind.CODEX
    # The versions the realhosts suite ran and tests/realhosts/captures/ recorded.
    tested_versions: ClassVar[tuple[str, ...]] = ("0.171.0",)
    # What `prepare` relies on, looked for in `codex exec --help` by the canary.
    help_argv: ClassVar[tuple[str, ...]] = ("exec", "--help")
    help_flags: ClassVar[tuple[str, ...]] = (
        "--json",
        "--skip-git-repo-check",
        "--cd",
        "--output-last-message",
        "--output-schema",
        "resume",
    )

    def prepare(self, goal: Goal, envelope: Envelope) -> HostInvocation:
        """``codex exec --json ... [resume <thread_id>] -`` with the prompt on stdin.

        ``goal.host.argv`` adds flags (``--model``, ``--sandbox``, ``-c k=v``)
        and may name the program first. All flags go before ``resume``: older
        CLIs accept ``-C`` and ``--output-schema`` only there.

        Raises:
            HostMissingError: the codex program is not on PATH.

        """
        program = require_program(goal.host)
        _, extra = split_program(goal.host)
        resume = session_to_resume(goal, envelope.state.host_session)
        argv = [
            program,
            "exec",
            "--json",
            "--skip-git-repo-check",
            "--cd",
            envelope.workdir,
            "--output-last-message",
            envelope.result_file,
        ]
        if "--output-schema" not in extra:
            argv += ["--output-schema", str(_schema_file(envelope))]
        argv += extra
        if resume is not None:
            argv += ["resume", resume.session_id]
        argv.append("-")  # read the prompt from stdin: no ARG_MAX limit, not in `ps`
        prompt = build_prompt(envelope, resumed=resume is not None)
        stall = StallWatch(
            pattern=RECONNECT_LINE,
            after_s=goal.host.unreachable_after_s or DEFAULT_UNREACHABLE_AFTER_S,
        )
        return HostInvocation(argv=argv, stdin=prompt.encode(), stall=stall, streams=True)

    def interpret(self, envelope: Envelope, output: HostOutput) -> Interpretation:
        """The result in codex's final agent message, or a typed failure. Pure."""
        parsed = parse_events(output.stdout)
        previous = envelope.state.host_session
        tokens = (0, 0)
        session: HostSession | None = previous
        if parsed.thread_id is not None:
            total_in, total_out = parsed.input_tokens, parsed.output_tokens
            if total_in is not None and total_out is not None:
                tokens = turn_tokens(self.kind, previous, parsed.thread_id, total_in, total_out)
            session = session_after_turn(
                self.kind,
                previous,
                parsed.thread_id,
                reported_input_tokens=total_in,
                reported_output_tokens=total_out,
            )
        outcome = self._outcome(envelope, output, parsed)
        if isinstance(outcome, TurnFailure) and _lost_session(outcome, output, parsed):
            session = no_session(self.kind)
        return Interpretation.of(
            outcome, session=session, input_tokens=tokens[0], output_tokens=tokens[1]
        )

    def activity_paths(self, env: Mapping[str, str]) -> list[str]:
        """``$CODEX_HOME/sessions``: Codex appends each event of a turn to its rollout file."""
        home = env.get("CODEX_HOME") or (str(Path(env["HOME"]) / ".codex") if "HOME" in env else "")
        return [str(Path(home) / "sessions")] if home else []

    def records_file(self, env: Mapping[str, str], reading: Interpretation) -> Path | None:
        """The thread's session file: ``$CODEX_HOME/sessions/*/*/*/rollout-*-<thread>.jsonl``.

        Codex records the rate-limit windows of each response there only. The
        newest such file, when a resumed thread has more than one.
        """
        thread = reading.session.session_id if reading.session is not None else ""
        if not SAFE_ID.fullmatch(thread):
            return None
        home = env.get("CODEX_HOME") or (str(Path(env["HOME"]) / ".codex") if "HOME" in env else "")
        if not home:
            return None
        found = sorted(
            (Path(home) / "sessions").glob(f"*/*/*/rollout-*-{thread}.jsonl"),
            key=lambda p: p.stat().st_mtime_ns,
        )
        return found[-1] if found else None

    def windows_in(self, records: str) -> list[UsageWindow]:
        """The rate-limit windows in the session file's tail. Pure."""
        return codex_windows(records)

    def _outcome(
        self, envelope: Envelope, output: HostOutput, parsed: CodexEvents
    ) -> HostResult | TurnFailure:
        failed = parsed.failure_message if parsed.terminal == "turn.failed" else None
        if failed is None and parsed.terminal is None and parsed.errors:
            failed = parsed.errors[-1]
        if failed is not None:
            return _from_error(failed, envelope)
        if parsed.terminal is None:
            return _without_completion(envelope, output, parsed)
        text = parsed.last_message or output.result_file_text
        if not text:
            return TurnFailure.of(
                FailureReason.NO_RESULT, "codex completed the turn without a final agent message"
            )
        return parse_result(text, source="codex's final message")


def _from_error(message: str, envelope: Envelope) -> HostResult | TurnFailure:
    diagnosis = diagnose(message)
    if diagnosis is Diagnosis.RATE_LIMIT:
        # Codex prints the reset as a clock in its own local zone, naming none.
        return rate_limited("codex", message, envelope, host_zone())
    if diagnosis is Diagnosis.UNREACHABLE:
        return unreachable("codex", message, envelope)
    if diagnosis is Diagnosis.SERVER_ERROR:
        return server_error("codex", message, envelope)
    return failure_for("codex", message, default=FailureReason.HOST_EXECUTION_ERROR)


def _without_completion(
    envelope: Envelope, output: HostOutput, parsed: CodexEvents
) -> HostResult | TurnFailure:
    """No turn.completed/turn.failed and no error event: judge by exit status and stderr."""
    stderr = error_line(output.stderr)
    if output.exit_code != 0 or output.signal is not None:
        if stderr and diagnose(stderr) is not Diagnosis.OTHER:
            return _from_error(stderr, envelope)
        how = f"signal {output.signal}" if output.signal is not None else f"code {output.exit_code}"
        tail = stderr[-STDERR_TAIL:] or "(no stderr)"
        return TurnFailure.of(FailureReason.HOST_EXIT, f"codex exited with {how}: {tail}")
    if output.stdout_dropped and output.result_file_text:
        # The event stream outgrew the captured stdout; the last message file survives.
        return parse_result(output.result_file_text, source="codex's --output-last-message file")
    if parsed.events == 0:
        return TurnFailure.of(
            FailureReason.MALFORMED_OUTPUT,
            f"codex printed no JSON events ({parsed.junk_lines} other lines); "
            "is this a codex CLI with `exec --json`?",
        )
    return TurnFailure.of(
        FailureReason.MALFORMED_OUTPUT,
        f"codex's event stream ended without turn.completed or turn.failed "
        f"after {parsed.events} events",
    )


def error_line(stderr: str) -> str:
    """The line of codex's stderr that says what went wrong. Pure.

    Codex prints ``WARNING: ...`` lines and, with RUST_BACKTRACE, a backtrace
    around its one ``Error: ...`` line; that line is the message when present.
    """
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    for line in lines:
        if line.lower().startswith("error:") or line.startswith("thread 'main' panicked"):
            return line
    return "\n".join(line for line in lines if not line.startswith("WARNING:")) or stderr.strip()


def _lost_session(failure: TurnFailure, output: HostOutput, parsed: CodexEvents) -> bool:
    texts = [failure.message, output.stderr, *parsed.errors]
    return any(diagnose(t) is Diagnosis.SESSION_MISSING for t in texts if t)
