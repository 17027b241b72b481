"""A fake ``gemini`` CLI: Gemini CLI's headless ``--output-format json`` report without a model.

It accepts Gemini CLI 0.61's options (``-p/--prompt``, ``-o/--output-format``,
``-r/--resume``, ``-m/--model``, ``-y/--yolo`` or ``--approval-mode``, ...;
``--flag=value`` too), refuses what the real one refuses with its words
(an unknown option, a bad choice, ``--yolo`` with ``--approval-mode``, no
``--prompt`` in a non-interactive run), reads the prompt from stdin and
prints the report the real CLI prints: on success one JSON object on stdout
(``session_id``, ``response``, ``stats``); on an API error a stack trace and
the JSON object on stderr, exit code the HTTP status modulo 256. Sessions
persist under ``$FAKE_GEMINI_HOME`` so ``--resume`` works across runs; an
unknown id fails the way the real CLI does (exit 42). The texts are those
in tests/realhosts/captures/gemini-*.json.

Environment:
    FAKE_GEMINI_MODE: ``success`` (default), ``prose`` (result JSON in prose),
        ``empty``, ``auth`` (401), ``rate_limit`` (429, retry in
        ``FAKE_GEMINI_RETRY_IN`` seconds), ``daily_quota`` (the daily quota),
        ``server_error`` (500), ``unreachable`` (fetch failed), ``retrying``
        (the retry lines of an unreachable server, forever), ``exit`` (crash).
    FAKE_GEMINI_RESULT: the result JSON the agent answers with.
    FAKE_GEMINI_RETRY_IN: seconds of the rate limit's retry delay (default 120).
    FAKE_GEMINI_LOG: append one JSON line per run: argv, stdin, cwd.
    FAKE_GEMINI_HOME: where sessions are kept (default: a dir in $TMPDIR).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
import uuid
from typing import Any

from loopx.testing.fakecli import log_invocation, session_home

VERSION = "0.61.0"
DEFAULT_RESULT = {"kind": "progress", "summary": "fake gemini turn", "next_action": "continue"}
# yargs options of Gemini CLI 0.61 (`gemini --help`): long name -> short alias.
VALUE_OPTIONS = {
    "model": "m", "prompt": "p", "prompt-interactive": "i", "worktree": "w",
    "approval-mode": None, "policy": None, "admin-policy": None,
    "allowed-mcp-server-names": None, "allowed-tools": None, "extensions": "e", "resume": "r",
    "session-file": None, "session-id": None, "delete-session": None,
    "include-directories": None, "output-format": "o",
}  # fmt: skip
BOOL_OPTIONS = {
    "debug": "d", "skip-trust": None, "sandbox": "s", "yolo": "y", "acp": None,
    "experimental-acp": None, "list-extensions": "l", "list-sessions": None,
    "screen-reader": None, "raw-output": None, "accept-raw-output-risk": None,
    "version": "v", "help": "h",
}  # fmt: skip
CHOICES = {
    "output-format": ("text", "json", "stream-json"),
    "approval-mode": ("default", "auto_edit", "yolo", "plan"),
}
# What Gemini CLI 0.61 prints (tests/realhosts/captures/gemini-*.json).
UNKNOWN_ARGUMENT = "Unknown argument: {name}"
MISSING_VALUE = "Not enough arguments following: {name}"
INVALID_CHOICE = 'Invalid values:\n  Argument: {name}, Given: "{given}", Choices: {choices}'
YOLO_AND_MODE = (
    "Cannot use both --yolo (-y) and --approval-mode together. Use --approval-mode=yolo instead."
)
NO_SESSIONS = "Error resuming session: No previous sessions found for this project."
INVALID_SESSION = (
    'Error resuming session: Invalid session identifier "{id}".\n'
    "  Searched for sessions in {dir}.\n"
    "  Use --list-sessions to see available sessions, then use --resume {{number}}, "
    "--resume {{uuid}}, or --resume latest."
)
AUTH = '{"error":{"code":401,"message":"API key not valid. Please pass a valid API key.",'
AUTH += '"status":"UNAUTHENTICATED","details":[]}}'
SERVER_ERROR = '{"error":{"code":500,"message":"Internal error encountered.",'
SERVER_ERROR += '"status":"INTERNAL","details":[]}}'
RATE_LIMIT = (
    "You exceeded your current quota, please check your plan and billing details.\n"
    "* Quota exceeded for metric: generativelanguage.googleapis.com/"
    "generate_content_free_tier_requests, limit: 10, model: {model}\n"
    "Please retry in {seconds}s.\nSuggested retry after {seconds}s."
)
DAILY_QUOTA = "You have exhausted your daily quota on this model."
UNREACHABLE = "exception TypeError: fetch failed sending request"
RETRY_LINE = f"Attempt {{n}} failed. Retrying with backoff... Error: {UNREACHABLE}"
STACK = "    at async GeminiChat.makeApiCallAndProcessStream (file:///fake/gemini.js:1:1)"


class UsageError(Exception):
    """An argument the real CLI refuses (exit 1 after its usage text)."""


def _lookup() -> dict[str, tuple[str, bool]]:
    names: dict[str, tuple[str, bool]] = {}
    for options, takes_value in ((VALUE_OPTIONS, True), (BOOL_OPTIONS, False)):
        for name, short in options.items():
            names[f"--{name}"] = (name, takes_value)
            if short:
                names[f"-{short}"] = (name, takes_value)
    return names


def parse(argv: list[str]) -> dict[str, str | bool]:
    """The options in ``argv`` by long name, as Gemini CLI 0.61's yargs reads them.

    Raises:
        UsageError: with the real CLI's message.

    """
    names = _lookup()
    flags: dict[str, str | bool] = {}
    i = 0
    while i < len(argv):
        arg, inline = argv[i], None
        if arg.startswith("--") and "=" in arg:
            arg, inline = arg.split("=", 1)
        if arg not in names:
            name = arg.lstrip("-") if arg.startswith("-") else None
            if name is None:  # a positional query
                i += 1
                continue
            raise UsageError(UNKNOWN_ARGUMENT.format(name=name))
        name, takes_value = names[arg]
        if takes_value and inline is None:
            if i + 1 >= len(argv) or argv[i + 1].startswith("-"):
                raise UsageError(MISSING_VALUE.format(name=arg.lstrip("-")))
            inline = argv[i + 1]
            i += 1
        value: str | bool = inline if takes_value and inline is not None else True
        if name in CHOICES and value not in CHOICES[name]:
            choices = ", ".join(f'"{c}"' for c in CHOICES[name])
            raise UsageError(INVALID_CHOICE.format(name=name, given=value, choices=choices))
        flags[name] = value
        i += 1
    if "yolo" in flags and "approval-mode" in flags:
        raise UsageError(YOLO_AND_MODE)
    return flags


def _stats(model: str) -> dict[str, Any]:
    tokens = {"input": 1000, "prompt": 1500, "candidates": 150, "total": 1700, "cached": 500,
              "thoughts": 50, "tool": 0}  # fmt: skip
    api = {"totalRequests": 1, "totalErrors": 0, "totalLatencyMs": 900, "errorsByType": {}}
    return {
        "models": {
            model: {"api": api, "tokens": tokens, "roles": {"main": {**api, "tokens": tokens}}}
        },
        "tools": {"totalCalls": 0, "totalSuccess": 0, "totalFail": 0, "byName": {}},
        "files": {"totalLinesAdded": 0, "totalLinesRemoved": 0},
    }


def _error_report(session: str, message: str, code: int) -> int:
    sys.stderr.write(f"Error when talking to Gemini API Full report available at: "
                     f"{tempfile.gettempdir()}/gemini-client-error-Turn.run-sendMessageStream.json "
                     f"_ApiError: {message}\n{STACK}\n{{\n  status: {code}\n}}\n")  # fmt: skip
    report = {"session_id": session, "error": {"type": "Error", "message": message, "code": code}}
    sys.stderr.write(json.dumps(report, indent=2) + "\n")
    return code % 256 or 1


def _run(session: str, mode: str, model: str, fmt: str) -> int:
    result = os.environ.get("FAKE_GEMINI_RESULT") or json.dumps(DEFAULT_RESULT)
    seconds = os.environ.get("FAKE_GEMINI_RETRY_IN", "120")
    errors = {
        "auth": (AUTH, 401),
        "rate_limit": (RATE_LIMIT.format(model=model, seconds=seconds), 429),
        "daily_quota": (DAILY_QUOTA, 429),
        "server_error": (SERVER_ERROR, 500),
        "unreachable": (UNREACHABLE, 1),
    }
    if mode in errors:
        return _error_report(session, *errors[mode])
    if mode == "retrying":
        for n in range(1, 10_000):
            sys.stderr.write(RETRY_LINE.format(n=n) + f"\n{STACK}\n")
            sys.stderr.flush()
            time.sleep(0.2)
        return 1
    texts = {"success": result, "prose": f"Done.\n\n```json\n{result}\n```", "empty": ""}
    response = texts[mode]
    if fmt == "json":
        report = {"session_id": session, "response": response, "stats": _stats(model)}
        sys.stdout.write(json.dumps(report, indent=2) + "\n")
    else:
        sys.stdout.write(response + "\n")
    return 0


def main() -> int:  # noqa: PLR0911 - one exit per way the real CLI ends early
    """Run the fake; returns the exit code."""
    try:
        flags = parse(sys.argv[1:])
    except UsageError as e:
        sys.stderr.write(f"Usage: gemini [options] [command]\n\n{e}\n")
        return 1
    if flags.get("version"):
        sys.stdout.write(VERSION + "\n")
        return 0
    if flags.get("help"):
        names = sorted({**VALUE_OPTIONS, **BOOL_OPTIONS}.items())
        options = [f"-{short}, --{name}" if short else f"--{name}" for name, short in names]
        sys.stdout.write("Usage: gemini [options] [command]\n\nOptions:\n")
        sys.stdout.write("".join(f"  {o}\n" for o in options))
        return 0
    if "prompt" not in flags:
        sys.stderr.write("fake gemini: only headless mode (-p/--prompt) is implemented\n")
        return 2
    stdin = sys.stdin.read()
    log_invocation("gemini", stdin)
    mode = os.environ.get("FAKE_GEMINI_MODE", "success")
    if mode == "exit":
        sys.stderr.write("Fatal error: fake gemini crashed\n")
        return 1
    home = session_home("gemini", "sessions")
    resume = flags.get("resume")
    if isinstance(resume, str):
        if not any(home.iterdir()):
            sys.stderr.write(NO_SESSIONS + "\n")
            return 42
        if not (home / resume).exists():
            sys.stderr.write(INVALID_SESSION.format(id=resume, dir=home) + "\n")
            return 42
    session = resume if isinstance(resume, str) else str(uuid.uuid4())
    turns = int((home / session).read_text()) if isinstance(resume, str) else 0
    (home / session).write_text(str(turns + 1))
    model = str(flags.get("model") or os.environ.get("GEMINI_MODEL") or "gemini-2.5-pro")
    return _run(session, mode, model, str(flags.get("output-format", "text")))


if __name__ == "__main__":
    raise SystemExit(main())
