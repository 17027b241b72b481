"""A loopback endpoint that answers every model API the CLIs speak with one fixed, free reply.

The canary's smoke runs a real CLI against it: the OpenAI Responses API
(``POST .../responses``, SSE: Codex), the Anthropic Messages API (``POST
.../messages``, SSE or JSON, and ``.../messages/count_tokens``: Claude Code) and
the Gemini API (``POST /v1beta/models/<m>:streamGenerateContent``,
``:generateContent``, ``:countTokens``: Gemini CLI). Every answer is
:data:`ANSWER` with :data:`USAGE_IN` / :data:`USAGE_OUT` tokens, so each run's
reported usage is a known multiple of the requests it made. It listens on
127.0.0.1 only and logs what it was asked.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Final, Self

ANSWER: Final = json.dumps(
    {"kind": "progress", "summary": "loopx canary echo", "next_action": "none"}
)
USAGE_IN: Final = 10
USAGE_OUT: Final = 2


@dataclass(frozen=True, slots=True)
class EchoRequest:
    """One model request the endpoint answered: its path and body text."""

    path: str
    body: str


def _sse(events: list[tuple[str | None, dict[str, Any]]]) -> Iterator[bytes]:
    for name, data in events:
        head = f"event: {name}\n" if name else ""
        yield f"{head}data: {json.dumps(data)}\n\n".encode()


def responses_events(n: int) -> list[tuple[str | None, dict[str, Any]]]:
    """The Responses API events of one answer."""
    item = {
        "type": "message",
        "id": f"msg_{n}",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": ANSWER, "annotations": []}],
    }
    usage = {
        "input_tokens": USAGE_IN,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": USAGE_OUT,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": USAGE_IN + USAGE_OUT,
    }
    response = {"id": f"resp_{n}", "object": "response", "status": "in_progress", "output": []}
    done = {**response, "status": "completed", "output": [item], "usage": usage}
    return [
        ("response.created", {"type": "response.created", "response": response}),
        ("response.output_item.added", {"type": "response.output_item.added", "item": item}),
        ("response.output_item.done", {"type": "response.output_item.done", "item": item}),
        ("response.completed", {"type": "response.completed", "response": done}),
    ]


def messages_answer(model: str, n: int) -> dict[str, Any]:
    """The Messages API answer as one JSON message."""
    return {
        "id": f"msg_{n}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": ANSWER}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": USAGE_IN, "output_tokens": USAGE_OUT},
    }


def messages_events(message: dict[str, Any]) -> list[tuple[str | None, dict[str, Any]]]:
    """The Messages API SSE events of one message."""
    start = {**message, "content": [], "stop_reason": None}
    text = message["content"][0]["text"]
    return [
        ("message_start", {"type": "message_start", "message": start}),
        (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
        ),
        (
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": text},
            },
        ),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": USAGE_OUT},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]


def gemini_answer(text: str, n: int) -> dict[str, Any]:
    """One Gemini ``GenerateContentResponse`` whose text is ``text``."""
    return {
        "candidates": [
            {"content": {"role": "model", "parts": [{"text": text}]}, "finishReason": "STOP"}
        ],
        "usageMetadata": {
            "promptTokenCount": USAGE_IN,
            "candidatesTokenCount": USAGE_OUT,
            "totalTokenCount": USAGE_IN + USAGE_OUT,
        },
        "modelVersion": "loopx-canary",
        "responseId": f"resp_{n}",
    }


# Gemini CLI's own JSON-schema'd calls (its router, the next-speaker check): one object fits all.
_GEMINI_UTILITY: Final = json.dumps(
    {
        "reasoning": "canary",
        "model_choice": "flash",
        "complexity_reasoning": "canary",
        "complexity_score": 10,
        "next_speaker": "user",
    }
)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib signature
        """Quiet: the request log is the record."""

    def _json(self, status: int, payload: object) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _stream(self, chunks: Iterator[bytes]) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("connection", "close")
        self.end_headers()
        for chunk in chunks:
            self.wfile.write(chunk)
        self.wfile.flush()
        self.close_connection = True

    def do_GET(self) -> None:
        self._json(200, {"data": [], "object": "list", "models": []})

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length).decode(errors="replace") if length else ""
        path = self.path.split("?")[0]
        if path.endswith(("/count_tokens", ":countTokens")):
            self._json(200, {"input_tokens": USAGE_IN, "totalTokens": USAGE_IN})
            return
        n = self.server.log(EchoRequest(path, raw))
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            body = {}
        body = body if isinstance(body, dict) else {}
        if path.endswith("/responses"):
            self._stream(_sse(responses_events(n)))
        elif path.endswith("/messages"):
            message = messages_answer(str(body.get("model") or "claude"), n)
            if body.get("stream"):
                self._stream(_sse(messages_events(message)))
            else:
                self._json(200, message)
        elif path.endswith(":streamGenerateContent"):
            self._stream(_sse([(None, gemini_answer(ANSWER, n))]))
        elif path.endswith(":generateContent"):
            self._json(200, gemini_answer(_GEMINI_UTILITY, n))
        else:
            self._json(404, {"error": {"code": 404, "message": f"loopx canary: no {path}"}})


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.requests: list[EchoRequest] = []
        self._lock = threading.Lock()

    def log(self, request: EchoRequest) -> int:
        with self._lock:
            self.requests.append(request)
            return len(self.requests)


class EchoServer:
    """The running endpoint: ``url``, the model ``requests`` it answered, ``close()``."""

    def __init__(self) -> None:
        self._server = _Server()
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="loopx-canary-echo", daemon=True
        )
        self._thread.start()

    @property
    def requests(self) -> list[EchoRequest]:
        """The model requests answered so far (token counts and utility calls included)."""
        with self._server._lock:  # noqa: SLF001 - the server's own lock, held briefly
            return list(self._server.requests)

    def close(self) -> None:
        """Stop serving and close the socket."""
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
