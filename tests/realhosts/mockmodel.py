"""A loopback mock of the two model APIs the real CLIs call, switchable per test.

It serves the OpenAI Responses API (``POST /v1/responses``, SSE, what Codex
speaks), the OpenAI Chat Completions API (``POST /v1/chat/completions``, SSE or
JSON, what OpenCode, Qwen Code, pi and aider speak; see :mod:`.mockchat`), the Anthropic
Messages API (``POST /v1/messages``, SSE or JSON, what Claude Code speaks) and the Gemini API (``POST /v1beta/models/<model>:
streamGenerateContent?alt=sse``, ``:generateContent`` and ``:countTokens``,
what Gemini CLI speaks; see :mod:`.mockgemini`) on 127.0.0.1 only, logs every
request it receives, and answers according to :attr:`MockModel.mode`:

``ok``           the model's final message is :attr:`MockModel.answer`
``tool``         first a tool call (a shell running :attr:`MockModel.command`), then ``ok``
                 once the tool result comes back
``429``          HTTP 429 rate limit with ``retry-after``
``usage_limit``  the subscription's usage limit until :attr:`MockModel.reset_at`, then ``ok``
``401``          HTTP 401: the key is rejected
``revoked``      HTTP 401: the login's token was revoked (each API's own words)
``500``          HTTP 500
``hang``         accept the request and never answer
``stall_once``   the first streamed request that carries LoopX's prompt gets the stream's first
                 events, then nothing more (a model stream that stopped); every other, ``ok``
``unreachable``  the server is closed: connections are refused

:attr:`MockModel.utilization` makes every answer report the account's usage
windows rising turn by turn, in each provider's headers: the n-th model
request reports the n-th value (the last one repeats) as the 5-hour window's
used percent (Codex: ``x-codex-primary-used-percent``, ``-window-minutes``,
``-reset-at``; Claude: ``anthropic-ratelimit-unified-5h-utilization`` as a
fraction, ``-5h-reset``, the status ``allowed_warning`` from 90%), the weekly
window at a steady 40%; :attr:`MockModel.answered_at` records when each
answer was sent.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.realhosts.mockchat import chat_completion, chat_sse
from tests.realhosts.mockgemini import (
    gemini_answer,
    gemini_failure,
    gemini_sse,
    gemini_utility_answer,
)

DEFAULT_ANSWER = {"kind": "progress", "summary": "mock model turn", "next_action": "continue"}
USAGE_IN, USAGE_OUT = 1200, 80


@dataclass
class Request:
    """One logged request."""

    method: str
    path: str
    headers: dict[str, str]
    body: dict[str, Any] | None


@dataclass
class MockModel:
    """The server's switchable behaviour and its request log."""

    mode: str = "ok"
    answer: str = json.dumps(DEFAULT_ANSWER)
    command: str = "ls"  # what the shell tool call runs (tool mode)
    edits: dict[str, str] = field(default_factory=dict)  # aider: path -> the file's new text
    commit_message: str = "mock edit"  # aider: the commit message it asks for
    retry_after: str = "120"  # the retry-after header of a 429 (seconds)
    reset_at: int = 0  # epoch seconds the usage limit resets (usage_limit mode)
    limit_claim: str = "five_hour"  # Anthropic's limit that was hit: five_hour, seven_day
    utilization: list[float] = field(default_factory=list)  # percent, per model request
    window_reset_at: int = 0  # epoch seconds the reported 5-hour window resets
    answered_at: list[tuple[float, float]] = field(default_factory=list)  # (time, percent)
    stalled: bool = False  # stall_once: the stream that stopped was served
    requests: list[Request] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _release: threading.Event = field(default_factory=threading.Event)

    def log(self, request: Request) -> None:
        with self._lock:
            self.requests.append(request)

    def window_headers(self, *, anthropic: bool) -> dict[str, str]:
        """The usage-window headers of the next answer (none without :attr:`utilization`)."""
        if not self.utilization:
            return {}
        with self._lock:
            used = self.utilization[min(len(self.answered_at), len(self.utilization) - 1)]
            self.answered_at.append((time.time(), used))
        reset = self.window_reset_at or int(time.time()) + 3600
        week = int(time.time()) + 5 * 86400
        if not anthropic:
            return {
                "x-codex-primary-used-percent": f"{used:.1f}",
                "x-codex-primary-window-minutes": "300",
                "x-codex-primary-reset-at": str(reset),
                "x-codex-secondary-used-percent": "40.0",
                "x-codex-secondary-window-minutes": "10080",
                "x-codex-secondary-reset-at": str(week),
            }
        warning = used >= 90
        headers = {
            "anthropic-ratelimit-unified-status": "allowed_warning" if warning else "allowed",
            "anthropic-ratelimit-unified-reset": str(reset),
            "anthropic-ratelimit-unified-representative-claim": "five_hour",
            "anthropic-ratelimit-unified-5h-utilization": f"{used / 100:.4f}",
            "anthropic-ratelimit-unified-5h-reset": str(reset),
            "anthropic-ratelimit-unified-7d-utilization": "0.4",
            "anthropic-ratelimit-unified-7d-reset": str(week),
        }
        if warning:
            headers["anthropic-ratelimit-unified-5h-surpassed-threshold"] = "0.9"
        return headers

    def model_requests(self, path: str) -> list[Request]:
        """The logged requests to ``path`` (e.g. ``/v1/responses``)."""
        with self._lock:
            return [r for r in self.requests if r.path.split("?")[0] == path]


def _sse(events: list[tuple[str, dict[str, Any]]]) -> Iterator[bytes]:
    for name, data in events:
        yield f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()


# "The call was answered" is the conversation's last item being a tool result: a resumed
# session carries the tool results of earlier turns, and the new turn's call is still due.
def _has_tool_result_openai(body: dict[str, Any]) -> bool:
    items = [i for i in body.get("input") or [] if isinstance(i, dict)]
    return bool(items) and items[-1].get("type") in (
        "function_call_output",
        "custom_tool_call_output",
    )


def _has_tool_result_anthropic(body: dict[str, Any]) -> bool:
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    content = messages[-1].get("content") if messages else None
    return isinstance(content, list) and any(
        isinstance(c, dict) and c.get("type") == "tool_result" for c in content
    )


def _openai_tool(body: dict[str, Any], command: str) -> dict[str, Any]:
    """A function call to the shell tool codex offered in this request."""
    names = {t.get("name") for t in body.get("tools") or [] if isinstance(t, dict)}
    args: dict[str, Any]
    if "exec_command" in names:
        name, args = "exec_command", {"cmd": command, "yield_time_ms": 10000}
    elif "shell_command" in names:
        name, args = "shell_command", {"command": command}
    else:
        name, args = "shell", {"command": ["bash", "-lc", command]}
    return {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "call_1",
        "name": name,
        "arguments": json.dumps(args),
        "status": "completed",
    }


def openai_events(model: MockModel, body: dict[str, Any], n: int) -> list[tuple[str, dict]]:
    """The Responses API SSE events of one answer."""
    rid = f"resp_{n}"
    if model.mode == "tool" and not _has_tool_result_openai(body):
        item = _openai_tool(body, model.command)
    else:
        item = {
            "type": "message",
            "id": f"msg_{n}",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": model.answer, "annotations": []}],
        }
    usage = {
        "input_tokens": USAGE_IN,
        "input_tokens_details": {"cached_tokens": 200},
        "output_tokens": USAGE_OUT,
        "output_tokens_details": {"reasoning_tokens": 10},
        "total_tokens": USAGE_IN + USAGE_OUT,
    }
    response = {"id": rid, "object": "response", "status": "in_progress", "output": []}
    return [
        ("response.created", {"type": "response.created", "response": response}),
        (
            "response.output_item.added",
            {"type": "response.output_item.added", "output_index": 0, "item": item},
        ),
        (
            "response.output_item.done",
            {"type": "response.output_item.done", "output_index": 0, "item": item},
        ),
        (
            "response.completed",
            {
                "type": "response.completed",
                "response": {**response, "status": "completed", "output": [item], "usage": usage},
            },
        ),
    ]


def anthropic_message(model: MockModel, body: dict[str, Any], n: int) -> dict[str, Any]:
    """The Messages API answer as one JSON message."""
    if model.mode == "tool" and not _has_tool_result_anthropic(body):
        content: list[dict[str, Any]] = [
            {
                "type": "tool_use",
                "id": f"toolu_{n}",
                "name": "Bash",
                "input": {"command": model.command},
            }
        ]
        stop = "tool_use"
    else:
        content, stop = [{"type": "text", "text": model.answer}], "end_turn"
    return {
        "id": f"msg_{n}",
        "type": "message",
        "role": "assistant",
        "model": body.get("model", "claude-mock"),
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {
            "input_tokens": USAGE_IN,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "output_tokens": USAGE_OUT,
        },
    }


def anthropic_events(message: dict[str, Any]) -> list[tuple[str, dict]]:
    """The Messages API SSE events of one message."""
    start = {**message, "content": [], "stop_reason": None}
    start["usage"] = {**message["usage"], "output_tokens": 1}
    events: list[tuple[str, dict]] = [
        ("message_start", {"type": "message_start", "message": start})
    ]
    for i, block in enumerate(message["content"]):
        if block["type"] == "text":
            first = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": block["text"]}
        else:
            first = {**block, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        events += [
            (
                "content_block_start",
                {"type": "content_block_start", "index": i, "content_block": first},
            ),
            ("content_block_delta", {"type": "content_block_delta", "index": i, "delta": delta}),
            ("content_block_stop", {"type": "content_block_stop", "index": i}),
        ]
    events += [
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
                "usage": {"output_tokens": message["usage"]["output_tokens"]},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
    return events


def _revoked(*, anthropic: bool) -> dict[str, Any]:
    """A 401 for a revoked login, as the Anthropic and OpenAI APIs word it."""
    if anthropic:
        message = "OAuth token has been revoked. Please obtain a new token."
        return {"type": "error", "error": {"type": "authentication_error", "message": message}}
    message = "Your authentication token has been invalidated. Please try signing in again."
    error = {"message": message, "type": "invalid_request_error", "code": "token_invalidated"}
    return {"error": {**error, "param": None}}


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        """Quiet: the request log is the record."""

    def _body(self) -> dict[str, Any] | None:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            value = json.loads(raw) if raw else None
        except ValueError:
            return None
        return value if isinstance(value, dict) else None

    def _json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _stream(
        self,
        chunks: Iterator[bytes],
        headers: dict[str, str] | None = None,
        then_hang: MockModel | None = None,
    ) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("connection", "close")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        for chunk in chunks:
            self.wfile.write(chunk)
            self.wfile.flush()
        if then_hang is not None:
            then_hang._release.wait()
        self.close_connection = True

    @staticmethod
    def _stalls(model: MockModel, body: dict[str, Any]) -> bool:
        """stall_once: whether this is the stream that stops (the first with LoopX's prompt)."""
        with model._lock:
            if model.mode != "stall_once" or model.stalled:
                return False
            if "LoopX" not in json.dumps(body.get("messages", [])):
                return False
            model.stalled = True
            return True

    def do_GET(self) -> None:
        self.server.model.log(Request("GET", self.path, dict(self.headers), None))
        if self.path.startswith("/v1/models"):
            self._json(200, {"data": [], "object": "list", "models": []})
        else:
            self._json(404, {"error": {"message": f"mock: no {self.path}"}})

    def do_POST(self) -> None:
        body = self._body()
        model = self.server.model
        model.log(Request("POST", self.path, dict(self.headers), body))
        path = self.path.split("?")[0]
        n = len(model.requests)
        if path.startswith("/v1beta/models/"):
            self._gemini(model, body or {}, path, n)
        elif path.endswith("/chat/completions"):
            self._chat(model, body or {}, n)
        elif path.endswith("/responses"):
            self._openai(model, body or {}, n)
        elif path.endswith("/messages/count_tokens"):
            self._json(200, {"input_tokens": 100})
        elif path.endswith("/messages"):
            self._anthropic(model, body or {}, n)
        else:
            self._json(404, {"error": {"message": f"mock: no {self.path}"}})

    def _common_failure(self, model: MockModel, anthropic: bool) -> bool:
        if model.mode == "hang":
            model._release.wait()
            return True
        if model.mode == "401":
            kind = "authentication_error" if anthropic else "invalid_api_key"
            error = {"type": kind, "message": "mock: invalid x-api-key"}
            self._json(401, {"type": "error", "error": error} if anthropic else {"error": error})
            return True
        if model.mode == "revoked":
            self._json(401, _revoked(anthropic=anthropic))
            return True
        if model.mode == "500":
            kind = "api_error" if anthropic else "server_error"
            error = {"type": kind, "message": "mock internal server error"}
            self._json(500, {"type": "error", "error": error} if anthropic else {"error": error})
            return True
        if model.mode == "429":
            error = {"type": "rate_limit_error", "message": "mock rate limit: too many requests"}
            if not anthropic:
                error = {**error, "code": "rate_limit_exceeded"}
            payload = {"type": "error", "error": error} if anthropic else {"error": error}
            self._json(429, payload, {"retry-after": model.retry_after})
            return True
        return False

    def _openai(self, model: MockModel, body: dict[str, Any], n: int) -> None:
        if self._common_failure(model, anthropic=False):
            return
        if model.mode == "usage_limit" and time.time() < model.reset_at:
            error = {
                "type": "usage_limit_reached",
                "message": "The usage limit has been reached",
                "plan_type": "plus",
                "resets_at": model.reset_at,
                "resets_in_seconds": max(0, model.reset_at - int(time.time())),
            }
            self._json(429, {"error": error})
            return
        self._stream(_sse(openai_events(model, body, n)), model.window_headers(anthropic=False))

    def _chat(self, model: MockModel, body: dict[str, Any], n: int) -> None:
        if self._common_failure(model, anthropic=False):
            return
        if model.mode == "usage_limit" and time.time() < model.reset_at:
            error = {
                "type": "insufficient_quota",
                "code": "insufficient_quota",
                "message": "You exceeded your current quota, please check your plan and "
                "billing details.",
            }
            self._json(429, {"error": error})
        elif body.get("stream"):
            self._stream(chat_sse(model, body, n))
        else:
            self._json(200, chat_completion(model, body, n))

    def _gemini(self, model: MockModel, body: dict[str, Any], path: str, n: int) -> None:
        if model.mode == "hang":
            model._release.wait()
            return
        if path.endswith(":countTokens"):
            self._json(200, {"totalTokens": 100})
            return
        failure = gemini_failure(model)
        if failure is not None:
            self._json(*failure)
        elif path.endswith(":streamGenerateContent"):
            self._stream(gemini_sse(gemini_answer(model, body, n)))
        elif path.endswith(":generateContent"):
            self._json(200, gemini_utility_answer(body))
        else:
            self._json(404, {"error": {"code": 404, "message": f"mock: no {self.path}"}})

    def _anthropic(self, model: MockModel, body: dict[str, Any], n: int) -> None:
        if self._common_failure(model, anthropic=True):
            return
        if model.mode == "usage_limit" and time.time() < model.reset_at:
            headers = {
                "anthropic-ratelimit-unified-status": "rejected",
                "anthropic-ratelimit-unified-reset": str(model.reset_at),
                "anthropic-ratelimit-unified-representative-claim": model.limit_claim,
            }
            error = {"type": "rate_limit_error", "message": "usage limit reached"}
            self._json(429, {"type": "error", "error": error}, headers)
            return
        message = anthropic_message(model, body, n)
        headers = model.window_headers(anthropic=True)
        if body.get("stream") and self._stalls(model, body):
            self._stream(_sse(anthropic_events(message)[:2]), headers, then_hang=model)
        elif body.get("stream"):
            self._stream(_sse(anthropic_events(message)), headers)
        else:
            self._json(200, message, headers)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    model: MockModel


class MockServer:
    """The running server: ``url``, ``model`` to switch and read, ``close()``."""

    def __init__(self) -> None:
        self.model = MockModel()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.model = self.model
        self.port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def unreachable(self) -> None:
        """Close the listening socket: the port now refuses connections."""
        self.model.mode = "unreachable"
        self.close()

    def close(self) -> None:
        self.model._release.set()
        self._server.shutdown()
        self._server.server_close()
