"""The Gemini API half of the mock model (what Gemini CLI calls), kept apart from the HTTP server.

Gemini CLI sends the turn to ``POST /v1beta/models/<model>:streamGenerateContent?alt=sse``
(SSE, one ``GenerateContentResponse`` per ``data:`` line). Before it, its model
router asks a small model to classify the prompt with a JSON-schema'd
``:generateContent``; :func:`gemini_utility_answer` answers every such
utility call with an object that satisfies the router's and the next-speaker
check's schemas. Errors use Google's shape: ``{"error": {"code", "message",
"status", "details"}}`` with ``RetryInfo`` / ``QuotaFailure`` details, which
the CLI turns into its own quota messages.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.realhosts.mockmodel import MockModel

USAGE_IN, USAGE_OUT = 1200, 80
SHELL_TOOL = "run_shell_command"
_RETRY_INFO = "type.googleapis.com/google.rpc.RetryInfo"
_QUOTA_FAILURE = "type.googleapis.com/google.rpc.QuotaFailure"


def _error(code: int, status: str, message: str, details: list[dict[str, Any]]) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "status": status, "details": details}}


def gemini_failure(model: MockModel) -> tuple[int, dict[str, Any]] | None:
    """(HTTP status, body) of the failure the current mode asks for, or None."""
    if model.mode == "401":
        return 401, _error(
            401, "UNAUTHENTICATED", "API key not valid. Please pass a valid API key.", []
        )
    if model.mode == "revoked":
        message = (
            "Request had invalid authentication credentials. Expected OAuth 2 access token, "
            "login cookie or other valid authentication credential."
        )
        return 401, _error(401, "UNAUTHENTICATED", message, [])
    if model.mode == "500":
        return 500, _error(500, "INTERNAL", "mock internal server error", [])
    if model.mode == "429":
        # A per-minute rate limit, as the Gemini API words it (with a retry delay).
        message = (
            "You exceeded your current quota, please check your plan and billing details.\n"
            "* Quota exceeded for metric: generativelanguage.googleapis.com/"
            "generate_content_free_tier_requests, limit: 10, model: gemini-mock\n"
            "Please retry in 120s."
        )
        details = [
            {
                "@type": _QUOTA_FAILURE,
                "violations": [{"quotaId": "GenerateRequestsPerMinutePerProjectPerModel-FreeTier"}],
            },
            {"@type": _RETRY_INFO, "retryDelay": "120s"},
        ]
        return 429, _error(429, "RESOURCE_EXHAUSTED", message, details)
    if model.mode == "usage_limit":
        # The daily quota: the CLI gives up at once (a TerminalQuotaError).
        delay = max(0, model.reset_at - int(time.time()))
        details = [
            {
                "@type": _QUOTA_FAILURE,
                "violations": [{"quotaId": "GenerateRequestsPerDayPerProjectPerModel-FreeTier"}],
            },
            {"@type": _RETRY_INFO, "retryDelay": f"{delay}s"},
        ]
        message = "You exceeded your current quota, please check your plan and billing details."
        return 429, _error(429, "RESOURCE_EXHAUSTED", message, details)
    return None


def _has_tool_result(body: dict[str, Any]) -> bool:
    """Whether the last content answers a call (a resumed chat holds earlier turns' answers)."""
    contents = [c for c in body.get("contents") or [] if isinstance(c, dict)]
    parts = contents[-1].get("parts") or [] if contents else []
    return any(isinstance(p, dict) and "functionResponse" in p for p in parts)


def gemini_answer(model: MockModel, body: dict[str, Any], n: int) -> list[dict[str, Any]]:
    """The streamed chunks of one model turn: a shell call (``tool`` mode) or the answer."""
    if model.mode == "tool" and not _has_tool_result(body):
        part: dict[str, Any] = {
            "functionCall": {
                "id": f"call_{n}",
                "name": SHELL_TOOL,
                "args": {"command": model.command},
            }
        }
    else:
        part = {"text": model.answer}
    usage = {
        "promptTokenCount": USAGE_IN,
        "candidatesTokenCount": USAGE_OUT,
        "totalTokenCount": USAGE_IN + USAGE_OUT,
    }
    return [
        {
            "candidates": [
                {"content": {"role": "model", "parts": [part]}, "finishReason": "STOP", "index": 0}
            ],
            "usageMetadata": usage,
            "modelVersion": "gemini-mock",
            "responseId": f"resp_{n}",
        }
    ]


def gemini_sse(chunks: list[dict[str, Any]]) -> Iterator[bytes]:
    """``alt=sse`` framing: one ``data:`` line per chunk."""
    for chunk in chunks:
        yield f"data: {json.dumps(chunk)}\r\n\r\n".encode()


def gemini_utility_answer(body: dict[str, Any]) -> dict[str, Any]:
    """A non-streamed answer to the CLI's own JSON-schema'd calls (router, next speaker)."""
    del body  # one object fits every schema the pinned CLI asks for
    text = json.dumps(
        {
            "reasoning": "mock",
            "model_choice": "flash",
            "complexity_reasoning": "mock",
            "complexity_score": 10,
            "next_speaker": "user",
        }
    )
    return {
        "candidates": [
            {"content": {"role": "model", "parts": [{"text": text}]}, "finishReason": "STOP"}
        ],
        "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15},
        "modelVersion": "gemini-mock-lite",
    }
