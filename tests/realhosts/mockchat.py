"""The OpenAI Chat Completions half of the mock model (what OpenCode, Qwen Code, pi and aider call).

``POST /v1/chat/completions``: streamed (``stream: true``, one ``chat.completion.chunk``
per ``data:`` line, then ``data: [DONE]``; the usage in a last chunk without choices, as
``stream_options.include_usage`` asks) or one ``chat.completion`` object. In ``tool`` mode
the first answer is a call of the shell tool the CLI offered (``bash``,
``run_shell_command``, ...) running :attr:`MockModel.command`; the answer after the tool's
result comes back is :attr:`MockModel.answer`. Requests that offer no tools (a CLI's own
title or summary calls) always get the answer text.

aider offers no tools: it asks for edits in its edit format (its system prompt begins
``Act as an expert software developer``). Its edit requests are answered, in any mode that
answers, with a *file listing* (``--edit-format whole``) of each of :attr:`MockModel.edits`
and then the answer text; its commit-message requests with :attr:`MockModel.commit_message`;
its history-summary requests with the conversation's own text, so that what a resumed
session carried stays visible in later requests.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.realhosts.mockmodel import MockModel

USAGE_IN, USAGE_OUT = 1200, 80
# The shell tools the CLIs offer, by name, with the argument that holds the command.
SHELL_TOOLS = {"bash": "command", "run_shell_command": "command", "shell": "command"}


def _offered_shell(body: dict[str, Any]) -> tuple[str, str] | None:
    for tool in body.get("tools") or []:
        function = tool.get("function") if isinstance(tool, dict) else None
        name = function.get("name") if isinstance(function, dict) else None
        if name in SHELL_TOOLS:
            return name, SHELL_TOOLS[name]
    return None


def _has_tool_result(body: dict[str, Any]) -> bool:
    """Whether the conversation's last message is a tool result (the call was answered)."""
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    return bool(messages) and messages[-1].get("role") == "tool"


# How aider 0.86's system prompts begin: its edit formats', its commit message's, its summary's.
AIDER_EDIT = "Act as an expert software developer"
AIDER_COMMIT = "one-line Git commit messages"
AIDER_SUMMARY = "summarize this partial conversation"


def _system_text(body: dict[str, Any]) -> str:
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    return "\n".join(str(m.get("content")) for m in messages if m.get("role") == "system")


def aider_request(body: dict[str, Any]) -> str | None:
    """Which of aider's requests this is (``edit``, ``commit``, ``summary``), or None."""
    system = _system_text(body)
    if system.startswith(AIDER_EDIT):
        return "edit"
    if AIDER_COMMIT in system:
        return "commit"
    if AIDER_SUMMARY in system:
        return "summary"
    return None


def aider_text(model: MockModel, body: dict[str, Any], request: str) -> str:
    """The answer to one of aider's requests (see the module's docstring)."""
    if request == "commit":
        return model.commit_message
    if request == "summary":
        messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
        return "\n".join(str(m.get("content")) for m in messages if m.get("role") != "system")
    listings = "".join(f"{path}\n```\n{text}```\n\n" for path, text in model.edits.items())
    return listings + model.answer


def chat_delta(model: MockModel, body: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """(the assistant's message delta, its finish reason) of one answer."""
    aider = aider_request(body)
    if aider is not None:
        return {"role": "assistant", "content": aider_text(model, body, aider)}, "stop"
    shell = _offered_shell(body)
    if model.mode == "tool" and shell is not None and not _has_tool_result(body):
        name, arg = shell
        call = {
            "index": 0,
            "id": f"call_{len(model.requests)}",
            "type": "function",
            "function": {
                "name": name,
                "arguments": json.dumps({arg: model.command, "description": "run it"}),
            },
        }
        return {"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls"
    return {"role": "assistant", "content": model.answer}, "stop"


def _usage() -> dict[str, Any]:
    return {
        "prompt_tokens": USAGE_IN,
        "completion_tokens": USAGE_OUT,
        "total_tokens": USAGE_IN + USAGE_OUT,
        "prompt_tokens_details": {"cached_tokens": 0},
    }


def chat_completion(model: MockModel, body: dict[str, Any], n: int) -> dict[str, Any]:
    """The answer as one ``chat.completion`` object (``stream`` unset)."""
    delta, finish = chat_delta(model, body)
    message = {k: v for k, v in delta.items() if k != "tool_calls"}
    if "tool_calls" in delta:
        message["tool_calls"] = [
            {k: v for k, v in c.items() if k != "index"} for c in delta["tool_calls"]
        ]
    return {
        "id": f"chatcmpl-{n}",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": body.get("model", "mock-model"),
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": _usage(),
    }


def chat_sse(model: MockModel, body: dict[str, Any], n: int) -> Iterator[bytes]:
    """The answer as ``chat.completion.chunk`` SSE lines, usage last, then ``[DONE]``."""
    delta, finish = chat_delta(model, body)
    base = {
        "id": f"chatcmpl-{n}",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": body.get("model", "mock-model"),
    }
    chunks = [
        {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
        {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]},
        {**base, "choices": [], "usage": _usage()},
    ]
    for chunk in chunks:
        yield f"data: {json.dumps(chunk)}\n\n".encode()
    yield b"data: [DONE]\n\n"
