"""What a CLI host's error text means: auth, rate limit, lost session, or anything else.

Codex and Claude report most failures as free text (a JSON ``error`` event,
an ``is_error`` result, or stderr). The patterns below are the wordings the
CLIs and their APIs are known to use (see docs/hosts.md); anything else is a
plain execution error. Pure functions only: the turn's start time stands in
for "now" so that interpreting a journal again gives the same answer.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, tzinfo
from enum import StrEnum
from typing import Final

from loopx.agents.hosts.resettime import read_reset
from loopx.turn.failures import RESET_UNKNOWN, FailureReason, TurnFailure
from loopx.turn.outcome import ResultKind
from loopx.turn.protocol import Envelope, HostResult

# No reset time given: the goal looks again after the minimum; its account backs off from 60 s
# doubling to 15 minutes and holds every goal of it meanwhile (loopx.accounts.rules).
MIN_RATE_LIMIT_WAIT_S: Final = 60.0
# A reset further away than this is read as a misreading: weekly limits are the longest the
# CLIs have (docs/hosts.md); the goal looks again after this at the latest.
MAX_RATE_LIMIT_WAIT_S: Final = 8 * 24 * 3600.0
# Evidence beside ``host_rate_limited`` when the reset the CLI named was too far to believe, or
# past any date LoopX can hold: read as resettime.MAX_RESET_S, and the summary says so.
RESET_CLAMPED: Final = "rate_limit_reset_clamped"
# The model server could not be reached: look again after this (docs/hosts.md).
UNREACHABLE_WAIT_S: Final = 300.0
# The model server answered 5xx even after the CLI's own retries: look again after this.
SERVER_ERROR_WAIT_S: Final = 300.0
HTTP_TOO_MANY_REQUESTS: Final = 429
AUTH_STATUSES: Final = frozenset({401, 403})  # unauthorized, forbidden
HTTP_SERVER_ERROR: Final = 500
HTTP_MAX: Final = 600
LOGIN_HINTS: Final = {
    "codex": "run `codex login` (or set OPENAI_API_KEY)",
    "claude": "run `claude` and `/login` once (or set ANTHROPIC_API_KEY)",
    "gemini": "set GEMINI_API_KEY (or run `gemini` once and log in with Google)",
    "opencode": "run `opencode auth login` (or set the provider's API key)",
    "qwen": "run `qwen auth` (or set OPENAI_API_KEY and OPENAI_BASE_URL)",
    "pi": "run `pi` and `/login` once (or set the provider's API key)",
    "aider": "set the provider's API key (OPENAI_API_KEY, ANTHROPIC_API_KEY, ...) or --api-key",
}


class Diagnosis(StrEnum):
    """The class of a CLI error message."""

    AUTH = "auth"
    RATE_LIMIT = "rate_limit"
    SESSION_MISSING = "session_missing"
    STALLED = "stalled"
    UNREACHABLE = "unreachable"
    SERVER_ERROR = "server_error"
    OTHER = "other"


# An expired, revoked or refused login, as the pinned CLIs word it: Codex 0.171 "unexpected
# status 401 Unauthorized: ..." and "Your access token could not be refreshed because your
# refresh token was revoked. Please log out and sign in again."; Claude Code 2.1.197 "Failed to
# authenticate. API Error: 401 ...", "OAuth token revoked · Please run /login", "Your account
# does not have access to Claude. Please login again ..."; Gemini CLI 0.61 the API's 401
# UNAUTHENTICATED ("Request had invalid authentication credentials"); aider 0.86 litellm's
# "litellm.AuthenticationError: ..." and its advice "The API provider is not able to
# authenticate you. Check your API key.".
_AUTH = re.compile(
    r"\b401\b|unauthori[sz]ed|invalid (?:x-)?api[ -]key|(?:missing|no) api[ -]key|not logged in"
    r"|not signed in|please run /login|codex login|authentication[_ ](?:error|failed)"
    r"|oauth token (?:has )?expired|token has been (?:invalidated|revoked)|api key not valid"
    r"|UNAUTHENTICATED|oauth token (?:has been )?revoked|failed to authenticate"
    r"|refresh token (?:was revoked|was already used|has expired|is no longer valid)"
    r"|access token could not be refreshed|sign in again|please login again"
    r"|token_invalidated|invalid authentication credentials"
    r"|AuthenticationError|not able to authenticate you",
    re.IGNORECASE,
)
_RATE_LIMIT = re.compile(
    r"rate[ _-]?limit|usage limit|hit your (?:[\w' ]{1,30} )?limit|limit reached|too many requests"
    r"|\b429\b|exceeded your current quota|exhausted your (?:daily )?quota|RESOURCE_EXHAUSTED",
    re.IGNORECASE,
)
_SESSION_MISSING = re.compile(
    r"no (?:saved )?(?:session|conversation|rollout|thread)s? found"
    r"|(?:session|conversation|thread|rollout)\b[^.\n]{0,80}\bnot found"
    r"|no previous sessions found|invalid session identifier",
    re.IGNORECASE,
)
# A stream idle timeout of the CLI's own: Codex "stream disconnected before completion: idle
# timeout waiting for SSE", Claude Code "API Error: Request timed out." (docs/work.md).
_STALLED = re.compile(r"idle[ _-]?timeout|stream (?:was )?idle|request timed out", re.IGNORECASE)
# Codex 0.171 loops on "Reconnecting... waiting for network (Connection failed: error
# sending request)"; Claude Code 2.1.197 ends with "API Error: Unable to connect to API
# (ConnectionRefused)"; OpenCode 1.18 logs "Cannot connect to API: Unable to connect"; Qwen Code
# 0.15 answers "[API Error: Connection error. (cause: fetch failed)]".
_UNREACHABLE = re.compile(
    r"waiting for network|unable to connect to (?:the )?api|cannot connect to api"
    r"|connection failed|connection refused|connection error"
    r"|ConnectionRefused|ECONNREFUSED|ENOTFOUND|EAI_AGAIN|network is unreachable"
    r"|could not resolve host|error sending request|fetch failed",
    re.IGNORECASE,
)
# A 5xx from the model server as each CLI words it: Claude Code 2.1.197 "API Error: 500 Internal
# server error", Codex 0.171 "We're currently experiencing high demand", Gemini CLI 0.61 the
# API's JSON with "code": 500 (its adapter reads the code), aider 0.86 litellm's
# "litellm.InternalServerError: ..." with its advice "The API provider's servers are down or
# overloaded." (a refused connection too: "... - Connection error.", unreachable first).
_SERVER_ERROR = re.compile(
    r"API Error: 5\d\d\b|internal server error|experiencing high demand|\bHTTP 5\d\d\b"
    r"|service unavailable|bad gateway|overloaded|InternalServerError|ServiceUnavailableError",
    re.IGNORECASE,
)

# In precedence order: an auth or limit message may also mention the network or a timeout.
_CLASSES: Final = (
    (_AUTH, Diagnosis.AUTH),
    (_RATE_LIMIT, Diagnosis.RATE_LIMIT),
    (_SESSION_MISSING, Diagnosis.SESSION_MISSING),
    (_STALLED, Diagnosis.STALLED),
    (_UNREACHABLE, Diagnosis.UNREACHABLE),
    (_SERVER_ERROR, Diagnosis.SERVER_ERROR),
)


def diagnose(message: str) -> Diagnosis:
    """Classify one error message: the first of :data:`_CLASSES` whose pattern it matches. Pure."""
    for pattern, diagnosis in _CLASSES:
        if pattern.search(message):
            return diagnosis
    return Diagnosis.OTHER


def turn_started_at(envelope: Envelope) -> datetime:
    """When the turn began: its deadline minus its timeout."""
    return envelope.deadline_at - timedelta(seconds=envelope.turn_timeout_s)


def rate_limited(
    host: str, message: str, envelope: Envelope, local: tzinfo | None = None
) -> HostResult:
    """The ``wait`` result a rate-limited turn commits: no state change, retry after the reset.

    A rate limit is the provider asking to come back later, not a failure of
    the goal: it must not count toward failure backoff, so it is a ``wait``.
    ``local`` is the zone the host printed a clock without a zone in. A reset
    past belief (:func:`~loopx.agents.hosts.resettime.read_reset`) is waited
    for at most MAX_RATE_LIMIT_WAIT_S, with ``RESET_CLAMPED`` and its warning.
    Never raises, whatever the text.
    """
    started = turn_started_at(envelope)
    reading = read_reset(message, started, local)
    seconds = MIN_RATE_LIMIT_WAIT_S if reading is None else reading.seconds
    seconds = min(max(seconds, MIN_RATE_LIMIT_WAIT_S), MAX_RATE_LIMIT_WAIT_S)
    retry_at = started + timedelta(seconds=seconds)
    evidence = [FailureReason.HOST_RATE_LIMITED.value]
    if reading is None:
        evidence.append(RESET_UNKNOWN)
    when = "no reset given" if reading is None else f"retrying after {retry_at:%Y-%m-%d %H:%M} UTC"
    if reading is not None and reading.warning is not None:
        evidence.append(RESET_CLAMPED)  # the warning, in the result the journal keeps
        when += f" (warning: {reading.warning})"
    return HostResult(
        kind=ResultKind.WAIT,
        summary=f"{host} is rate limited; {when}: {message.strip()[:300]}",
        wait_seconds=seconds,
        evidence=evidence,
        turn_key=envelope.turn_key,
        goal_id=envelope.goal_id,
    )


def unreachable(host: str, message: str, envelope: Envelope) -> HostResult:
    """The ``wait`` result of a turn whose host could not reach its model server.

    The network or the provider is down, not the goal: like a rate limit it is
    a ``wait`` (evidence ``host_unreachable``) that does not count toward the
    failure streak, and the goal is looked at again after UNREACHABLE_WAIT_S.
    """
    what = f"{host} could not reach its model server"
    return _provider_wait(
        what, message, envelope, FailureReason.HOST_UNREACHABLE, UNREACHABLE_WAIT_S
    )


def server_error(host: str, message: str, envelope: Envelope) -> HostResult:
    """The ``wait`` result of a turn whose model server kept answering 5xx.

    The CLIs retry a server error themselves first; when they give up, the
    provider is having trouble, not the goal: a ``wait`` (evidence
    ``host_server_error``) that does not count toward the failure streak,
    looked at again after SERVER_ERROR_WAIT_S.
    """
    what = f"{host}'s model server failed"
    return _provider_wait(
        what, message, envelope, FailureReason.HOST_SERVER_ERROR, SERVER_ERROR_WAIT_S
    )


def _provider_wait(
    what: str, message: str, envelope: Envelope, reason: FailureReason, wait_s: float
) -> HostResult:
    retry_at = turn_started_at(envelope) + timedelta(seconds=wait_s)
    return HostResult(
        kind=ResultKind.WAIT,
        summary=f"{what}; retrying after {retry_at:%Y-%m-%d %H:%M} UTC: {message.strip()[:300]}",
        wait_seconds=wait_s,
        evidence=[reason.value],
        turn_key=envelope.turn_key,
        goal_id=envelope.goal_id,
    )


def is_server_status(status: object) -> bool:
    """Whether an HTTP status a CLI reported is a server error (5xx)."""
    return isinstance(status, int) and HTTP_SERVER_ERROR <= status < HTTP_MAX


def reported_count(value: object) -> int:
    """A token count from a CLI's JSON: a non-negative int, else 0."""
    return value if isinstance(value, int) and value >= 0 else 0


def failure_for(host: str, message: str, *, default: FailureReason) -> TurnFailure:
    """A typed failure for an error message that is not a rate limit. Pure."""
    text = message.strip()[:500] or "(no message)"
    match diagnose(message):
        case Diagnosis.AUTH:
            return TurnFailure.of(
                FailureReason.HOST_AUTH,
                f"{host} is not authenticated: {text}; "
                + LOGIN_HINTS.get(host, f"log {host} in or set its API key"),
            )
        case Diagnosis.SESSION_MISSING:
            return TurnFailure.of(
                FailureReason.HOST_EXECUTION_ERROR,
                f"{host} could not resume its session: {text}; the next turn starts a new one",
            )
        case Diagnosis.STALLED:
            return TurnFailure.of(FailureReason.HOST_STALLED, f"{host} stalled: {text}")
        case _:
            return TurnFailure.of(default, f"{host}: {text}")
