"""A fake ``codex`` CLI: ``codex exec --json`` output without a model.

It accepts ``codex exec [FLAGS] [resume THREAD_ID] [PROMPT|-]``, reads the
prompt from stdin for ``-``, and prints the JSONL events of codex-rs
``exec_events.rs``. Threads persist under ``$FAKE_CODEX_HOME`` so ``resume``
works across runs and ``turn.completed`` usage is thread-cumulative, as the
real CLI reports it.

Environment:
    FAKE_CODEX_MODE: ``success`` (default), ``prose`` (result JSON inside
        prose and a fence), ``no_message``, ``invalid`` (a message that is not
        the result), ``malformed`` (not JSONL), ``no_completion``, ``auth``,
        ``rate_limit``, ``failed`` (turn.failed), ``retry_then_success``
        (a transient ``error`` event, then success), ``exit`` (crash).
    FAKE_CODEX_RESULT: the result JSON the agent answers with.
    FAKE_CODEX_TOKENS: ``IN,OUT`` tokens this run uses (default ``1000,200``).
    FAKE_CODEX_LOG: append one JSON line per run: argv, stdin, cwd.
    FAKE_CODEX_HOME: where threads are kept (default: a dir in $TMPDIR).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

DEFAULT_RESULT = {"kind": "progress", "summary": "fake codex turn", "next_action": "continue"}
VALUE_FLAGS = {
    "-C", "--cd", "-m", "--model", "-s", "--sandbox", "-c", "--config", "-p", "--profile",
    "--output-schema", "-o", "--output-last-message", "--color", "-i", "--image", "--add-dir",
}  # fmt: skip


def _emit(event: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def _home() -> Path:
    default = Path(tempfile.gettempdir()) / f"fake-codex-{os.getuid()}"
    home = Path(os.environ.get("FAKE_CODEX_HOME") or default) / "threads"
    home.mkdir(parents=True, exist_ok=True)
    return home


def _parse(argv: list[str]) -> tuple[dict[str, str], str | None, str | None]:
    """(flag values, resume thread id, prompt) of ``exec`` arguments."""
    flags: dict[str, str] = {}
    positional: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
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


def _message(mode: str, result: str) -> str:
    if mode == "prose":
        return f"I made progress on the objective.\n\n```json\n{result}\n```\nThat is all."
    if mode == "invalid":
        return "I did some work but forgot the JSON."
    return result


def main() -> int:  # noqa: C901, PLR0911 - one branch per documented failure mode
    """Run the fake; returns the exit code."""
    args = sys.argv[1:]
    if args[:1] != ["exec"] or "--json" not in args:
        sys.stderr.write("fake codex: only `codex exec --json ...` is implemented\n")
        return 2
    flags, resume, prompt = _parse(args[1:])
    stdin = sys.stdin.read() if prompt in (None, "-") else ""
    if log := os.environ.get("FAKE_CODEX_LOG"):
        with Path(log).open("a") as f:
            f.write(json.dumps({"argv": sys.argv, "stdin": stdin, "cwd": str(Path.cwd())}) + "\n")
    if schema := flags.get("--output-schema"):
        json.loads(Path(schema).read_text())  # a bad schema file crashes, as codex refuses it
    mode = os.environ.get("FAKE_CODEX_MODE", "success")
    if mode == "exit":
        sys.stderr.write("thread 'main' panicked at exec/src/lib.rs: fake crash\n")
        return 101
    if mode == "malformed":
        sys.stdout.write("Reading prompt from stdin...\nthis is not an event stream\n")
        return 0
    home = _home()
    if resume is not None and not (home / resume).exists():
        sys.stderr.write(f"Error: thread/resume failed: no rollout found for thread id {resume}\n")
        return 1
    thread = resume or str(uuid.uuid4())
    totals = json.loads((home / thread).read_text()) if resume else [0, 0, 0]
    _emit({"type": "thread.started", "thread_id": thread})
    _emit({"type": "turn.started"})
    if mode in ("auth", "rate_limit", "failed"):
        message = {
            "auth": "unexpected status 401 Unauthorized: Missing bearer or basic authentication "
            "in header, url: https://api.openai.com/v1/responses",
            "rate_limit": "You've hit your usage limit. Upgrade to Pro or try again in "
            "2 hours 5 minutes.",
            "failed": "stream disconnected before completion: fake network error",
        }[mode]
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
    (home / thread).write_text(json.dumps(totals))
    usage = {
        "input_tokens": totals[0],
        "cached_input_tokens": totals[1],
        "output_tokens": totals[2],
    }
    _emit({"type": "turn.completed", "usage": usage})
    if (last := flags.get("--output-last-message", flags.get("-o"))) and mode != "no_message":
        Path(last).write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
