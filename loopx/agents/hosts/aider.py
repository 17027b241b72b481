"""The ``aider`` host: aider run as ``aider --message-file /dev/stdin --yes-always ...``.

One turn is one non-interactive aider run in the goal's workdir: the prompt is
read from stdin, aider answers once, applies the edits its answer holds and
commits them (its own ``--auto-commits``; a turn's commits are the goal's), then
exits. aider keeps no session of its own: the goal's session is the chat history
file aider appends each run to (``--chat-history-file``, in the goal's directory,
never in the worktree), restored on the next turn (``--restore-chat-history``);
the session id is that file's path. A run that restored it prints ``Restored
previous conversation history.``. With ``--analytics-log /dev/stderr`` and
``--no-analytics`` aider 0.86 sends nothing anywhere and writes each event as one
JSON line on stderr: ``message_send`` holds the exact ``prompt_tokens``,
``completion_tokens`` and ``cost`` of each model call; stdout's ``Tokens: 1.2k
sent, 80 received. Cost: $0.0014 message, $0.0014 session.`` is the fallback. A
failed model call does not fail the run (exit 0): litellm's exception and aider's
advice go to stdout (``litellm.AuthenticationError: ...``, ``The API provider is
not able to authenticate you. Check your API key.``); a 429, a 5xx or a refused
connection is retried first with a doubling delay (``Retrying in 0.2
seconds...``) for about a minute.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Final

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
from loopx.agents.hosts.prompt import build_prompt
from loopx.agents.hosts.session import continues, session_after_turn, session_to_resume
from loopx.agents.hosts.stallwatch import DEFAULT_UNREACHABLE_AFTER_S, StallWatch
from loopx.registry.goalrecords import Goal, HostKind
from loopx.registry.hostprogram import require_program, split_program
from loopx.root import GOALS_NAME
from loopx.state import HostSession
from loopx.turn.failures import FailureReason, TurnFailure
from loopx.turn.protocol import Envelope, HostResult

STDERR_TAIL: Final = 400
RESTORED: Final = "Restored previous conversation history."
# The flags every run gets: no questions (--yes-always answers them; shell commands the model
# suggests still need an explicit yes, so they never run), plain output, no update check or
# release notes, no analytics sent (the local log goes to stderr), no .gitignore edit, no
# browser opened for a model warning, no URL in the prompt fetched, and no repo map: its cache
# (.aider.tags.cache.v4/) would be left untracked in the worktree. Flags in the goal's host
# argv come after these and win (``--map-tokens 1024`` turns the repo map back on).
BASE_FLAGS: Final = (
    "--yes-always",
    "--no-pretty",
    "--no-stream",
    "--no-fancy-input",
    "--no-check-update",
    "--no-show-release-notes",
    "--no-analytics",
    "--analytics-log",
    "/dev/stderr",
    "--no-gitignore",
    "--no-show-model-warnings",
    "--no-detect-urls",
    "--map-tokens",
    "0",
)
# What aider 0.86 prints while it retries a failed model call: litellm's exception, aider's
# advice for it (``The API provider ...``) and the delay. Only these for the goal's
# --unreachable-after: LoopX stops it and reads the last error.
RETRY_LINE: Final = r"^(?:litellm\.\w+|The API provider|Retrying in [\d.]+ seconds)"
_ERROR_START: Final = re.compile(r"^litellm\.\w+(?:Error|Exception)\b.*$", re.MULTILINE)
_RETRYING: Final = re.compile(r"^Retrying in [\d.]+ seconds\.*$", re.MULTILINE)
_USAGE: Final = re.compile(
    r"^Tokens: ([\d.]+[kM]?) sent,(?: [^,]* cache (?:write|hit),)* ([\d.]+[kM]?) received\."
    r"(?: Cost: \$([\d.]+) message)?",
    re.MULTILINE,
)
_SUFFIX: Final = {"": 1, "k": 1_000, "M": 1_000_000}
# aider's 0.86 announcements end at the first blank line after ``Aider v<version>``.
_ANNOUNCED: Final = re.compile(r"^Aider v\S+\n(?:.+\n)*?\n", re.MULTILINE)
# The environment of every run: wide lines (aider wraps its messages at the terminal width,
# 80 columns in a pipe) so that each message is one line for the stall watch and the diagnosis.
RUN_ENV: Final = {"COLUMNS": "1000"}


@dataclass
class AiderUsage:
    """The tokens and cost one aider run reported."""

    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    calls: int = 0  # model calls it reported (``message_send`` events or usage lines)


def history_file(envelope: Envelope) -> str:
    """Where a session this turn starts keeps aider's chat history: the goal's directory. Pure.

    Named after the turn that began it, so that a fresh session never appends to an
    older one's file.
    """
    name = f"{envelope.epoch}-{envelope.seq}.chat.md"
    return str(Path(envelope.root) / GOALS_NAME / envelope.goal_id / "aider" / name)


def analytics_events(stderr: str) -> list[dict[str, Any]]:
    """The events aider's analytics log wrote on stderr (``--analytics-log``), in order. Pure."""
    events = []
    for line in stderr.splitlines():
        text = line.strip()
        if not text.startswith('{"event"'):
            continue
        try:
            event = json.loads(text)
        except ValueError:
            continue
        if isinstance(event, dict) and isinstance(event.get("properties"), dict):
            events.append(event)
    return events


def token_count(text: str) -> int:
    """A count as aider prints it: ``80``, ``1.2k``, ``12k``, ``1.5M``. Pure."""
    number, suffix = (text[:-1], text[-1]) if text[-1:] in {"k", "M"} else (text, "")
    try:
        return round(float(number) * _SUFFIX[suffix])
    except ValueError:
        return 0


def _cost(value: object) -> float:
    return float(value) if isinstance(value, int | float) and value >= 0 else 0.0


def reported_usage(output: HostOutput) -> AiderUsage:
    """The run's tokens and cost: the exact ``message_send`` events, else the usage lines. Pure.

    The usage lines round (``1.2k``); the events are what the model server reported.
    """
    usage = AiderUsage()
    for event in analytics_events(output.stderr):
        if event.get("event") != "message_send":
            continue
        properties = event["properties"]
        usage.input_tokens += reported_count(properties.get("prompt_tokens"))
        usage.output_tokens += reported_count(properties.get("completion_tokens"))
        usage.cost_usd += _cost(properties.get("cost"))
        usage.calls += 1
    if usage.calls:
        return usage
    for match in _USAGE.finditer(output.stdout):
        usage.input_tokens += token_count(match.group(1))
        usage.output_tokens += token_count(match.group(2))
        usage.cost_usd += float(match.group(3)) if match.group(3) else 0.0
        usage.calls += 1
    return usage


def last_error(stdout: str) -> str | None:
    """The last model-call error aider printed: litellm's line and aider's advice after it. Pure."""
    starts = list(_ERROR_START.finditer(stdout))
    if not starts:
        return None
    rest = stdout[starts[-1].start() :]
    block = rest.split("\n\n", 1)[0]
    return _RETRYING.sub("", block).strip()


def answer_text(stdout: str) -> str:
    """The model's answer as aider printed it: stdout after its announcements. Pure."""
    announced = _ANNOUNCED.search(stdout)
    return stdout[announced.end() :] if announced else stdout


class AiderHost:
    """The adapter of ``--host-kind aider``."""

    kind = HostKind.AIDER
    # The versions the realhosts suite ran and tests/realhosts/captures/ recorded.
    tested_versions: ClassVar[tuple[str, ...]] = ("0.86.2",)
    # Every flag `prepare` passes, looked for in `aider --help` by the canary (which finds an
    # option at the start of a help line: ``--pretty, --no-pretty`` lists ``--pretty``); aider
    # refuses a flag it does not know, so a renamed one would fail every turn.
    help_argv: ClassVar[tuple[str, ...]] = ("--help",)
    help_flags: ClassVar[tuple[str, ...]] = (
        "--message-file",
        "--yes-always",
        "--pretty",
        "--stream",
        "--fancy-input",
        "--check-update",
        "--show-release-notes",
        "--analytics",
        "--analytics-log",
        "--gitignore",
        "--show-model-warnings",
        "--detect-urls",
        "--map-tokens",
        "--chat-history-file",
        "--input-history-file",
        "--restore-chat-history",
    )

    def prepare(self, goal: Goal, envelope: Envelope) -> HostInvocation:
        """``aider --message-file /dev/stdin <BASE_FLAGS> --chat-history-file F ...``.

        The prompt goes on stdin. ``goal.host.argv`` adds flags (``--model``,
        ``--edit-format``, ``--test-cmd``/``--auto-test``, ``--weak-model``) and may
        name the program first; the model's endpoint and key come from the
        environment as aider reads them (``OPENAI_API_BASE``, ``OPENAI_API_KEY``,
        ``AIDER_MODEL``, ...). aider works in the git repository of its current
        directory: the turn runner starts it in the goal's workdir.

        Raises:
            HostMissingError: the aider program is not on PATH.

        """
        program = require_program(goal.host)
        _, extra = split_program(goal.host)
        resume = session_to_resume(goal, envelope.state.host_session)
        history = resume.session_id if resume is not None else history_file(envelope)
        argv = [program, "--message-file", "/dev/stdin", *BASE_FLAGS]
        argv += ["--chat-history-file", history]
        argv += ["--input-history-file", str(Path(history).parent / "input.history")]
        argv.append("--restore-chat-history" if resume is not None else "--no-restore-chat-history")
        argv += extra
        prompt = build_prompt(envelope, resumed=resume is not None)
        stall = StallWatch(
            pattern=RETRY_LINE,
            after_s=goal.host.unreachable_after_s or DEFAULT_UNREACHABLE_AFTER_S,
        )
        return HostInvocation(argv=argv, stdin=prompt.encode(), env=dict(RUN_ENV), stall=stall)

    def interpret(self, envelope: Envelope, output: HostOutput) -> Interpretation:
        """The result in aider's printed answer, or a typed failure. Pure."""
        usage = reported_usage(output)
        return Interpretation.of(
            _outcome(envelope, output, usage),
            session=session_of_run(self.kind, envelope.state.host_session, envelope, output),
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cost_usd=usage.cost_usd,
        )


def session_of_run(
    kind: str, previous: HostSession | None, envelope: Envelope, output: HostOutput
) -> HostSession:
    """The session after a run: the kept one if aider restored it, else the run's own. Pure.

    A kept session that aider did not restore (its history file is gone, or the
    goal's ``--session-max-turns`` started afresh) is dropped: the history this run
    wrote is not known for sure to be the kept file or this turn's own, so the next
    turn starts a new one rather than append to the wrong file.
    """
    restored = RESTORED in output.stdout
    kept = previous is not None and previous.kind == kind and bool(previous.session_id)
    if kept and previous is not None:
        if restored:
            return session_after_turn(kind, previous, previous.session_id)
        return HostSession(kind=kind, session_id="")
    fresh = history_file(envelope)
    return session_after_turn(kind, previous if continues(kind, previous, fresh) else None, fresh)


def _from_error(message: str, envelope: Envelope) -> HostResult | TurnFailure:
    match diagnose(message):
        case Diagnosis.RATE_LIMIT:
            return rate_limited("aider", message, envelope)
        case Diagnosis.SERVER_ERROR:
            return server_error("aider", message, envelope)
        case Diagnosis.UNREACHABLE:
            return unreachable("aider", message, envelope)
        case _:
            return failure_for("aider", message, default=FailureReason.HOST_EXECUTION_ERROR)


def _outcome(envelope: Envelope, output: HostOutput, usage: AiderUsage) -> HostResult | TurnFailure:
    error = last_error(output.stdout)
    if usage.calls == 0 and error is not None:
        return _from_error(error, envelope)
    if output.exit_code != 0 or output.signal is not None:
        return _exited(envelope, output, error)
    if usage.calls == 0:
        excerpt = output.stdout.strip()[-STDERR_TAIL:] or "(empty)"
        return TurnFailure.of(
            FailureReason.NO_RESULT,
            f"aider made no model call (is this aider with --message-file?); stdout ends: "
            f"{excerpt!r}",
        )
    return parse_result(answer_text(output.stdout), source="aider's answer")


def _exited(envelope: Envelope, output: HostOutput, error: str | None) -> HostResult | TurnFailure:
    """The outcome of a run that exited non-zero or was stopped: its error, else its exit."""
    if error is not None:
        return _from_error(error, envelope)
    text = "\n".join(
        line for line in output.stderr.splitlines() if not line.startswith('{"event"')
    ).strip()
    if text and diagnose(text) is not Diagnosis.OTHER:
        return _from_error(text, envelope)
    how = f"signal {output.signal}" if output.signal is not None else f"code {output.exit_code}"
    tail = (text or output.stdout.strip())[-STDERR_TAIL:] or "(no output)"
    return TurnFailure.of(FailureReason.HOST_EXIT, f"aider exited with {how}: {tail}")
