"""A fake ``codex`` CLI: ``codex exec --json`` output without a model.

It accepts what codex 0.171 accepts, ``codex exec [FLAGS] [resume [RESUME
FLAGS] THREAD_ID] [PROMPT|-]``, and rejects what it rejects (``--cd`` and the
other exec-only flags after ``resume``) with the same message. It reads the
prompt from stdin for ``-`` and prints the JSONL events of codex-rs
``exec_events.rs`` with the messages captured from the real binary
(tests/realhosts/captures/). Threads persist under ``$FAKE_CODEX_HOME`` so
``resume`` works across runs and ``turn.completed`` usage is thread-cumulative,
as the real CLI reports it.

Environment:
    FAKE_CODEX_MODE: ``success`` (default), ``prose`` (result JSON inside
        prose and a fence), ``no_message``, ``invalid`` (a message that is not
        the result), ``malformed`` (not JSONL), ``no_completion``, ``auth``,
        ``rate_limit`` (the usage limit, reset in ``FAKE_CODEX_RESET_IN``
        seconds, printed as a local clock like codex), ``too_many_requests``
        (429), ``server_error`` (500), ``unreachable`` (reconnects forever),
        ``failed`` (turn.failed), ``retry_then_success`` (a transient
        ``error`` event, then success), ``exit`` (crash), ``stall_fresh`` (a new
        thread says nothing after ``turn.started`` until killed; a resumed one
        succeeds), ``idle_timeout`` (codex's own stream idle timeout, turn.failed).
    FAKE_CODEX_RESET_IN: seconds until the fake usage limit resets (default 7200).
    FAKE_CODEX_LIMIT_FILE: a provider-side usage limit shared by every run that names the
        file (an account): while it holds an ISO time in the future, a run answers the usage
        limit with that reset, printed to the minute as codex prints it, whatever the mode.
    FAKE_CODEX_RESULT: the result JSON the agent answers with.
    FAKE_CODEX_TOKENS: ``IN,OUT`` tokens this run uses (default ``1000,200``).
    FAKE_CODEX_LOG: append one JSON line per run: argv, stdin, cwd.
    FAKE_CODEX_HOME: where threads are kept (default: a dir in $TMPDIR).
    FAKE_CODEX_USED_PERCENT: ``P1,P2,...``: the 5-hour window's used percent the thread's
        n-th run reports (the last repeats), recorded as codex 0.171 records it: a
        ``token_count`` record with ``rate_limits`` (and the weekly window at 40%) in the
        thread's session file under ``$CODEX_HOME/sessions/`` (only with CODEX_HOME set).
    FAKE_CODEX_WINDOW_RESET_IN: seconds until that window resets (default 3600).
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from loopx.testing.fakecli import answer_version_or_help, log_invocation, session_home

VERSION = "codex-cli 0.171.0"
DEFAULT_RESULT = {"kind": "progress", "summary": "fake codex turn", "next_action": "continue"}
BOOL_FLAGS = ("--json", "--skip-git-repo-check", "--full-auto", "--oss", "--ephemeral")
# `codex exec --help` / `codex exec resume --help` of codex-cli 0.171.0.
VALUE_FLAGS = {
    "-C", "--cd", "-m", "--model", "-s", "--sandbox", "-c", "--config", "-p", "--profile",
    "--output-schema", "-o", "--output-last-message", "--color", "-i", "--image", "--add-dir",
    "--enable", "--disable", "--remote", "--remote-auth-token-env", "--local-provider",
    "--thread-source", "--cyber-access-program",
}  # fmt: skip
EXEC_ONLY = {
    "-C", "--cd", "-s", "--sandbox", "-p", "--profile", "--add-dir", "--color", "--oss",
    "--local-provider", "--approve-for-me",
}  # fmt: skip
# Messages as codex-cli 0.171.0 prints them (tests/realhosts/captures/codex-*.json).
USAGE_LIMIT = (
    "You\u2019ve hit your usage limit. Upgrade to Pro (https://chatgpt.com/explore/pro), visit "
    "https://chatgpt.com/settings/usage to purchase more credits or try again at {when}."
)
RECONNECT = "Reconnecting... waiting for network (Connection failed: error sending request)"
MODEL_WARNING = (
    "Model metadata for `{model}` not found. Defaulting to fallback metadata; this can degrade "
    "performance and cause issues."
)
PATH_WARNING = (
    "WARNING: proceeding, even though we could not create PATH aliases: Refusing to create "
    'helper binaries under temporary dir "/tmp"\n'
)


class Rejected(Exception):  # noqa: N818 - mirrors clap's error, not a LoopX error
    """An argument the real CLI refuses."""


def _emit(event: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def _parse(argv: list[str]) -> tuple[dict[str, str], str | None, str | None]:
    """(flag values, resume thread id, prompt) of ``exec`` arguments."""
    flags: dict[str, str] = {}
    positional: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if positional[:1] == ["resume"] and arg in EXEC_ONLY:
            raise Rejected(arg)
        if arg in VALUE_FLAGS and i + 1 < len(argv):
            flags[arg] = argv[i + 1]
            i += 2
            continue
        if arg.startswith("-") and arg != "-":
            flags[arg] = ""
        else:
            positional.append(arg)
        i += 1
    if positional[:1] == ["resume"]:
        thread = positional[1] if len(positional) > 1 else None
        prompt = positional[2] if len(positional) > 2 else None  # noqa: PLR2004 - resume ID PROMPT
        return flags, thread, prompt
    return flags, None, positional[0] if positional else None


def reset_clock(reset: datetime, now: datetime) -> str:
    """The reset moment as codex prints it: local time, the date only when not today."""
    clock = f"{reset.hour % 12 or 12}:{reset.minute:02d} {'AM' if reset.hour < 12 else 'PM'}"  # noqa: PLR2004
    if reset.date() == now.date():
        return clock
    day = reset.day
    suffix = "th" if 11 <= day % 100 <= 13 else {1: "st", 2: "nd", 3: "rd"}.get(day % 10, "th")  # noqa: PLR2004
    return f"{reset:%b} {day}{suffix}, {reset.year} {clock}"


def _rejected(arg: str) -> int:
    sys.stderr.write(
        f"error: unexpected argument '{arg}' found\n\n"
        f"  tip: to pass '{arg}' as a value, use '-- {arg}'\n\n"
        "Usage: codex exec resume <SESSION_ID> [PROMPT]\n\n"
        "For more information, try '--help'.\n"
    )
    return 2


def _account_limit() -> str | None:
    """The usage limit of ``FAKE_CODEX_LIMIT_FILE`` while its reset is ahead, else None."""
    name = os.environ.get("FAKE_CODEX_LIMIT_FILE")
    if not name:
        return None
    try:
        reset = datetime.fromisoformat(Path(name).read_text().strip()).astimezone()
    except (FileNotFoundError, ValueError):
        return None
    now = datetime.now().astimezone()
    return USAGE_LIMIT.format(when=reset_clock(reset, now)) if reset > now else None


def _failure_message(mode: str) -> str | None:
    """The turn.failed message of a failure ``mode`` (None: no such mode)."""
    if (limited := _account_limit()) is not None:
        return limited
    now = datetime.now().astimezone()
    reset = now + timedelta(seconds=int(os.environ.get("FAKE_CODEX_RESET_IN", "7200")))
    return {
        "auth": "unexpected status 401 Unauthorized: Missing bearer or basic authentication "
        "in header, url: https://api.openai.com/v1/responses",
        "rate_limit": USAGE_LIMIT.format(when=reset_clock(reset, now)),
        "too_many_requests": "exceeded retry limit, last status: 429 Too Many Requests",
        "server_error": "We\u2019re currently experiencing high demand, which may cause "
        "temporary errors.",
        "failed": "stream disconnected before completion: fake network error",
        "idle_timeout": "stream disconnected before completion: idle timeout waiting for SSE",
    }.get(mode)


def _message(mode: str, result: str) -> str:
    if mode == "prose":
        return f"I made progress on the objective.\n\n```json\n{result}\n```\nThat is all."
    if mode == "invalid":
        return "I did some work but forgot the JSON."
    return result


def _persist(home: Path, thread: str, totals: list[int]) -> None:
    """Keep the thread's cumulative tokens, and record its rate-limit windows."""
    (home / thread).write_text(json.dumps(totals))
    _record_windows(thread)


def _record_windows(thread: str) -> None:
    """Append this run's rate-limit snapshot to the thread's session file, as codex 0.171 does."""
    steps = os.environ.get("FAKE_CODEX_USED_PERCENT")
    home = os.environ.get("CODEX_HOME")
    if not steps or not home:
        return
    now = datetime.now().astimezone()
    folder = Path(home) / "sessions" / f"{now:%Y}" / f"{now:%m}" / f"{now:%d}"
    folder.mkdir(parents=True, exist_ok=True)
    found = sorted((Path(home) / "sessions").glob(f"*/*/*/rollout-*-{thread}.jsonl"))
    path = found[-1] if found else folder / f"rollout-{now:%Y-%m-%dT%H-%M-%S}-{thread}.jsonl"
    runs = len(path.read_text().splitlines()) if path.exists() else 0
    percents = [float(p) for p in steps.split(",")]
    reset = int(time.time()) + int(os.environ.get("FAKE_CODEX_WINDOW_RESET_IN", "3600"))
    limits = {
        "limit_id": "codex",
        "limit_name": None,
        "primary": {
            "used_percent": percents[min(runs, len(percents) - 1)],
            "window_minutes": 300,
            "resets_at": reset,
        },
        "secondary": {"used_percent": 40.0, "window_minutes": 10080, "resets_at": reset + 86400},
        "credits": None,
        "plan_type": None,
    }
    stamp = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    record = {
        "timestamp": stamp,
        "type": "event_msg",
        "payload": {"type": "token_count", "info": None, "rate_limits": limits},
    }
    with path.open("a") as f:
        f.write(json.dumps(record) + "\n")


def _open_thread(home: Path, resume: str | None) -> tuple[str, list[int]]:
    """The thread this run works in and its usage so far; a new one's rollout is written now."""
    thread = resume or str(uuid.uuid4())
    totals = json.loads((home / thread).read_text()) if resume else [0, 0, 0]
    if resume is None:  # codex writes a thread's rollout as it starts
        (home / thread).write_text(json.dumps(totals))
    return thread, totals


def _stall_if(mode: str, resume: str | None) -> None:
    """``stall_fresh`` on a new thread: a model stream that stopped, not a line more until killed."""
    if mode == "stall_fresh" and resume is None:
        while True:
            time.sleep(3600)


def main() -> int:
    """Run the fake; returns the exit code."""
    args = sys.argv[1:]
    options = [*(f"{f} <value>" for f in sorted(VALUE_FLAGS)), *BOOL_FLAGS]
    if answer_version_or_help(args, VERSION, "codex exec [OPTIONS] [PROMPT]", options, ["resume"]):
        return 0
    return _exec(args)


def _exec(args: list[str]) -> int:  # noqa: C901, PLR0911, PLR0912 - a branch per documented mode
    if args[:1] != ["exec"] or "--json" not in args:
        sys.stderr.write("fake codex: only `codex exec --json ...` is implemented\n")
        return 2
    try:
        flags, resume, prompt = _parse(args[1:])
    except Rejected as e:
        return _rejected(str(e))
    stdin = sys.stdin.read() if prompt in (None, "-") else ""
    log_invocation("codex", stdin)
    if schema := flags.get("--output-schema"):
        json.loads(Path(schema).read_text())  # a bad schema file crashes, as codex refuses it
    mode = os.environ.get("FAKE_CODEX_MODE", "success")
    if mode == "exit":
        sys.stderr.write("thread 'main' panicked at exec/src/lib.rs: fake crash\n")
        return 101
    if mode == "malformed":
        sys.stdout.write("Reading prompt from stdin...\nthis is not an event stream\n")
        return 0
    home = session_home("codex", "threads")
    sys.stderr.write(PATH_WARNING)
    if resume is not None and not (home / resume).exists():
        sys.stderr.write(
            f"Error: thread/resume: thread/resume failed: no rollout found for thread id {resume} "
            "(code -32600)\n"
        )
        return 1
    thread, totals = _open_thread(home, resume)
    _emit({"type": "thread.started", "thread_id": thread})
    if model := flags.get("--model", flags.get("-m")):
        item = {"id": "item_w", "type": "error", "message": MODEL_WARNING.format(model=model)}
        _emit({"type": "item.completed", "item": item})
    _emit({"type": "turn.started"})
    _stall_if(mode, resume)
    if mode == "unreachable":
        while True:  # codex 0.171 never gives up; the turn runner must stop it
            _emit({"type": "error", "message": RECONNECT})
            time.sleep(0.2)
    if (message := _failure_message(mode)) is not None:
        _emit({"type": "error", "message": message})
        _emit({"type": "turn.failed", "error": {"message": message}})
        return 1
    if mode == "retry_then_success":
        _emit({"type": "error", "message": "Reconnecting... 1/5 (stream disconnected)"})
    result = os.environ.get("FAKE_CODEX_RESULT") or json.dumps(DEFAULT_RESULT)
    _emit(
        {
            "type": "item.completed",
            "item": {"id": "item_0", "type": "reasoning", "text": "thinking"},
        }
    )
    _emit(
        {
            "type": "item.completed",
            "item": {
                "id": "item_1",
                "type": "command_execution",
                "command": "bash -lc ls",
                "aggregated_output": "README.md\n",
                "exit_code": 0,
                "status": "completed",
            },
        }
    )
    if mode == "no_completion":
        return 0
    text = _message(mode, result)
    if mode != "no_message":
        _emit(
            {
                "type": "item.completed",
                "item": {"id": "item_2", "type": "agent_message", "text": text},
            }
        )
    used_in, used_out = (int(n) for n in os.environ.get("FAKE_CODEX_TOKENS", "1000,200").split(","))
    totals = [totals[0] + used_in, totals[1] + used_in // 2, totals[2] + used_out]
    _persist(home, thread, totals)
    usage = {
        "input_tokens": totals[0],
        "cached_input_tokens": totals[1],
        "cache_write_input_tokens": 0,
        "output_tokens": totals[2],
        "reasoning_output_tokens": totals[2] // 8,
    }
    _emit({"type": "turn.completed", "usage": usage})
    if (last := flags.get("--output-last-message", flags.get("-o"))) and mode != "no_message":
        Path(last).write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
