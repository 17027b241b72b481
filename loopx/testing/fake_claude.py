"""A fake ``claude`` CLI: ``claude -p --output-format json|stream-json`` output without a model.

It accepts ``claude -p [--output-format json|stream-json] [--resume ID] [FLAGS] [PROMPT]``,
reads the prompt from stdin when none is given, and prints the one result
object Claude Code prints in print mode (with ``stream-json``, after its
``system``/``init`` and ``assistant`` events, one JSON object a line). Sessions persist under
``$FAKE_CLAUDE_HOME`` so ``--resume`` works across runs; an unknown id fails
the way the real CLI does.

Environment:
    FAKE_CLAUDE_MODE: ``success`` (default), ``prose`` (result JSON in prose
        and a fence), ``invalid`` (a message that is not the result),
        ``empty``, ``malformed`` (not JSON), ``auth``, ``rate_limit``
        (``usage limit reached|<epoch>``), ``rate_limit_429``
        (``api_error_status: 429``), ``session_limit`` / ``weekly_limit``
        (a subscriber's limit, reset in ``FAKE_CLAUDE_RESET_IN`` seconds, worded
        as Claude Code 2.1.197 words it), ``limit_text`` (a 429 whose words are
        ``FAKE_CLAUDE_LIMIT_TEXT``: any reset a provider might print), ``server_error`` (500),
        ``unreachable`` (connection refused), ``max_turns``,
        ``execution_error``, ``budget``, ``exit`` (crash without output), ``stall`` (the
        init event, then silence until killed), ``stall_fresh`` (stalls unless it resumes a
        session), ``idle_timeout`` (Claude Code's own "Request timed out." error).
    FAKE_CLAUDE_RESULT: the result JSON the agent answers with.
    FAKE_CLAUDE_RESET_IN: seconds until the fake rate limit resets (default 3600).
    FAKE_CLAUDE_LIMIT_TEXT: the words of the ``limit_text`` mode's limit.
    FAKE_CLAUDE_LOG: append one JSON line per run: argv, stdin, cwd.
    FAKE_CLAUDE_HOME: where sessions are kept (default: a dir in $TMPDIR).
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from loopx.testing.fakecli import answer_version_or_help, log_invocation, session_home

VERSION = "2.1.197 (Claude Code)"
DEFAULT_RESULT = {"kind": "progress", "summary": "fake claude turn", "next_action": "continue"}
VALUE_FLAGS = {
    "--output-format", "--resume", "-r", "--model", "--max-turns", "--permission-mode",
    "--allowedTools", "--allowed-tools", "--disallowedTools", "--disallowed-tools",
    "--append-system-prompt", "--system-prompt", "--max-budget-usd", "--json-schema", "--add-dir",
    "--session-id", "--input-format", "--fallback-model", "--settings", "--mcp-config",
    "--agents", "--setting-sources", "--betas", "--tools",
}  # fmt: skip
BOOL_FLAGS = {
    "-p", "--print", "--verbose", "-c", "--continue", "--dangerously-skip-permissions",
    "--include-partial-messages", "--strict-mcp-config", "--fork-session", "-d", "--debug",
    "--no-session-persistence",
}  # fmt: skip
# Result texts as Claude Code 2.1.197 prints them (tests/realhosts/captures/claude-*.json).
LIMIT = "You've hit your {what} limit \u00b7 resets {when}"
UNREACHABLE = "API Error: Unable to connect to API (ConnectionRefused)"
RATE_LIMITED = (
    "API Error: Server is temporarily limiting requests (not your usage limit) \u00b7 Rate limited"
)
IDLE_TIMEOUT = "API Error: Request timed out."
SERVER_ERROR = (
    "API Error: 500 Internal server error. This is a server-side issue, usually temporary "
    "\u2014 try again in a moment."
)


def reset_words(reset: datetime, now: datetime, zone: str) -> str:
    """``8:56pm (Europe/Berlin)``, or ``Dec 3, 7:56pm (…)`` when more than a day away."""
    minute = "" if reset.minute == 0 else f":{reset.minute:02d}"
    clock = f"{reset.hour % 12 or 12}{minute}{'am' if reset.hour < 12 else 'pm'}"  # noqa: PLR2004
    if (reset - now).total_seconds() > 86400:  # noqa: PLR2004 - a day, as claude decides it
        year = f", {reset.year}" if reset.year != now.year else ""
        clock = f"{reset:%b} {reset.day}{year}, {clock}"
    return f"{clock} ({zone})"


def _parse(argv: list[str]) -> tuple[dict[str, str], str | None]:
    flags: dict[str, str] = {}
    prompt: str | None = None
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in VALUE_FLAGS and i + 1 < len(argv):
            flags[arg] = argv[i + 1]
            i += 2
            continue
        if arg.startswith("-") and arg.split("=")[0] not in BOOL_FLAGS | VALUE_FLAGS:
            raise ValueError(arg)
        if arg.startswith("-"):
            flags[arg] = ""
        else:
            prompt = arg
        i += 1
    return flags, prompt


def _payload(session: str, mode: str, result: str) -> tuple[dict[str, Any], int]:
    base: dict[str, Any] = {
        "type": "result",
        "subtype": "success",
        "is_error": False,
        "duration_ms": 2300,
        "duration_api_ms": 2100,
        "api_error_status": None,
        "num_turns": 3,
        "session_id": session,
        "total_cost_usd": 0.0123,
        "usage": {
            "input_tokens": 10,
            "cache_creation_input_tokens": 500,
            "cache_read_input_tokens": 1000,
            "output_tokens": 200,
            "server_tool_use": {"web_search_requests": 0},
            "service_tier": "standard",
        },
        "permission_denials": [],
        "uuid": str(uuid.uuid4()),
    }
    reset = int(time.time()) + int(os.environ.get("FAKE_CLAUDE_RESET_IN", "3600"))
    zone = os.environ.get("TZ", "UTC").lstrip(":") or "UTC"
    now = datetime.now(ZoneInfo(zone))
    when = reset_words(datetime.fromtimestamp(reset, ZoneInfo(zone)), now, zone)
    texts = {
        "success": result,
        "prose": f"Done for this turn.\n\n```json\n{result}\n```",
        "invalid": "I did some work but forgot the JSON.",
        "empty": "",
        "auth": "Invalid API key · Please run /login",
        "rate_limit": f"Claude AI usage limit reached|{reset}",
        "rate_limit_429": RATE_LIMITED,
        "session_limit": LIMIT.format(what="session", when=when),
        "weekly_limit": LIMIT.format(what="weekly", when=when),
        "limit_text": os.environ.get("FAKE_CLAUDE_LIMIT_TEXT", ""),
        "server_error": SERVER_ERROR,
        "unreachable": UNREACHABLE,
        "idle_timeout": IDLE_TIMEOUT,
    }
    status = {
        "rate_limit_429": 429,
        "session_limit": 429,
        "weekly_limit": 429,
        "limit_text": 429,
        "server_error": 500,
    }
    if mode in texts:
        base["result"] = texts[mode]
        if mode not in ("success", "prose", "invalid", "empty"):
            base.update(
                is_error=True, total_cost_usd=0, usage={"input_tokens": 0, "output_tokens": 0}
            )
            base["api_error_status"] = status.get(mode)
            return base, 1
        return base, 0
    subtype = {
        "max_turns": "error_max_turns",
        "execution_error": "error_during_execution",
        "budget": "error_max_budget_usd",
    }[mode]
    base.update(subtype=subtype, is_error=True)
    if mode == "execution_error":
        base["errors"] = ["Tool execution failed: fake error"]
    return base, 1


def _event(event: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def _stall() -> None:
    """Say nothing more, as a model stream that stopped does, until killed."""
    while True:
        time.sleep(3600)


def main() -> int:
    """Run the fake; returns the exit code."""
    options = sorted(f"{f} <value>" for f in VALUE_FLAGS) + sorted(BOOL_FLAGS)
    if answer_version_or_help(sys.argv[1:], VERSION, "claude [options] [prompt]", options):
        return 0
    return _print_mode()


def _print_mode() -> int:
    try:
        flags, prompt = _parse(sys.argv[1:])
    except ValueError as e:
        sys.stderr.write(f"error: unknown option '{e}'\n")
        return 1
    if "-p" not in flags and "--print" not in flags:
        sys.stderr.write("fake claude: only print mode (-p) is implemented\n")
        return 2
    stdin = sys.stdin.read() if prompt is None else ""
    log_invocation("claude", stdin)
    mode = os.environ.get("FAKE_CLAUDE_MODE", "success")
    if mode == "exit":
        sys.stderr.write("Error: fake claude crashed\n")
        return 2
    if mode == "malformed":
        sys.stdout.write("Welcome to Claude Code! (this is not JSON)\n")
        return 0
    home = session_home("claude", "sessions")
    resume = flags.get("--resume") or flags.get("-r")
    if resume is not None and not (home / resume).exists():
        sys.stderr.write(f"No conversation found with session ID: {resume}\n")
        return 1
    session = resume or str(uuid.uuid4())
    turns = int((home / session).read_text()) if resume else 0
    (home / session).write_text(str(turns + 1))
    result = os.environ.get("FAKE_CLAUDE_RESULT") or json.dumps(DEFAULT_RESULT)
    streaming = flags.get("--output-format") == "stream-json"
    if streaming:
        _event({"type": "system", "subtype": "init", "session_id": session, "cwd": os.getcwd()})
    if mode == "stall" or (mode == "stall_fresh" and resume is None):
        _stall()
    payload, code = _payload(session, "success" if mode == "stall_fresh" else mode, result)
    if streaming:
        text = str(payload.get("result", ""))
        _event({"type": "assistant", "session_id": session, "message": {"content": text}})
        _event(payload)
    elif flags.get("--output-format", "text") == "json":
        sys.stdout.write(json.dumps(payload) + "\n")
    else:
        sys.stdout.write(str(payload.get("result", "")) + "\n")
    return code


if __name__ == "__main__":
    raise SystemExit(main())
