"""What a CLI host's error text means: auth, rate limit, lost session, or anything else.

Codex and Claude report most failures as free text (a JSON ``error`` event,
an ``is_error`` result, or stderr). The patterns below are the wordings the
CLIs and their APIs are known to use (see docs/hosts.md); anything else is a
plain execution error. Pure functions only: the turn's start time stands in
for "now" so that interpreting a journal again gives the same answer.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Final
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from loopx.turn.failures import FailureReason, TurnFailure
from loopx.turn.protocol import Envelope, HostResult, ResultKind

DEFAULT_RATE_LIMIT_WAIT_S: Final = 1800.0  # no reset time given: look again in 30 minutes
MIN_RATE_LIMIT_WAIT_S: Final = 60.0
MAX_RATE_LIMIT_WAIT_S: Final = 30 * 24 * 3600.0  # HostResult.wait_seconds' bound
LOGIN_HINTS: Final = {
    "codex": "run `codex login` (or set OPENAI_API_KEY)",
    "claude": "run `claude` and `/login` once (or set ANTHROPIC_API_KEY)",
}


class Diagnosis(StrEnum):
    """The class of a CLI error message."""

    AUTH = "auth"
    RATE_LIMIT = "rate_limit"
    SESSION_MISSING = "session_missing"
    OTHER = "other"


_AUTH = re.compile(
    r"\b401\b|unauthori[sz]ed|invalid (?:x-)?api[ -]key|(?:missing|no) api[ -]key|not logged in"
    r"|not signed in|please run /login|codex login|authentication[_ ](?:error|failed)"
    r"|oauth token (?:has )?expired|token has been (?:invalidated|revoked)",
    re.IGNORECASE,
)
_RATE_LIMIT = re.compile(
    r"rate[ _-]?limit|usage limit|hit your limit|limit reached|too many requests|\b429\b",
    re.IGNORECASE,
)
_SESSION_MISSING = re.compile(
    r"no (?:saved )?(?:session|conversation|rollout|thread)s? found"
    r"|(?:session|conversation|thread|rollout)\b[^.\n]{0,80}\bnot found",
    re.IGNORECASE,
)

_EPOCH = re.compile(r"(?:\||resets?_?at\"?\s*[:=]\s*)(\d{10})\b", re.IGNORECASE)
_SECONDS = re.compile(r"(?:resets_in_seconds|retry[- ]after)\"?\s*[:=]?\s*(\d+)", re.IGNORECASE)
_UNIT_S = {"d": 86400, "h": 3600, "m": 60, "s": 1}
_DURATION_PART = r"\d+\s*(?:days?|d|hours?|hrs?|h|minutes?|mins?|m|seconds?|secs?|s)\b"
_DURATION = re.compile(
    rf"(?:try again|retry|resets?)\s+in\s+((?:{_DURATION_PART}[\s,]*(?:and\s+)?)+)", re.IGNORECASE
)
_PART = re.compile(r"(\d+)\s*([a-z]+)", re.IGNORECASE)
_CLOCK = re.compile(
    r"(?:resets?|try again at)\s+(?:at\s+)?(\d{1,2})(?::(\d{2}))?\s*([ap]m)?\s*"
    r"\(([A-Za-z_]+/[A-Za-z_/+-]+|UTC)\)",
    re.IGNORECASE,
)


def diagnose(message: str) -> Diagnosis:
    """Classify one error message. Pure."""
    if _AUTH.search(message):
        return Diagnosis.AUTH
    if _RATE_LIMIT.search(message):
        return Diagnosis.RATE_LIMIT
    if _SESSION_MISSING.search(message):
        return Diagnosis.SESSION_MISSING
    return Diagnosis.OTHER


def turn_started_at(envelope: Envelope) -> datetime:
    """When the turn began: its deadline minus its timeout."""
    return envelope.deadline_at - timedelta(seconds=envelope.turn_timeout_s)


def _clock_reset(match: re.Match[str], now: datetime) -> datetime | None:
    hour, minute, ampm, zone = match.group(1), match.group(2), match.group(3), match.group(4)
    try:
        tz = ZoneInfo("UTC" if zone.upper() == "UTC" else zone)
    except (ZoneInfoNotFoundError, ValueError):
        return None
    h = int(hour) % 12 + (12 if ampm and ampm.lower() == "pm" else 0) if ampm else int(hour)
    if h > 23:  # noqa: PLR2004 - the last hour of a day
        return None
    local_now = now.astimezone(tz)
    reset = local_now.replace(hour=h, minute=int(minute or 0), second=0, microsecond=0)
    return reset if reset > local_now else reset + timedelta(days=1)


def retry_after_s(message: str, now: datetime) -> float | None:
    """Seconds until a rate limit resets, from the message's wording, or None. Pure.

    Understands an epoch (``usage limit reached|1750708800``, ``resets_at``),
    seconds (``resets_in_seconds``, ``retry-after``), a duration (``try again
    in 2 days 3 hours``) and a clock time with its zone (``resets 4pm
    (Europe/Berlin)``).
    """
    if m := _EPOCH.search(message):
        return float(m.group(1)) - now.timestamp()
    if m := _SECONDS.search(message):
        return float(m.group(1))
    if m := _DURATION.search(message):
        total = sum(int(n) * _UNIT_S[unit[0].lower()] for n, unit in _PART.findall(m.group(1)))
        return float(total)
    if (m := _CLOCK.search(message)) and (reset := _clock_reset(m, now)) is not None:
        return (reset - now).total_seconds()
    return None


def rate_limited(host: str, message: str, envelope: Envelope) -> HostResult:
    """The ``wait`` result a rate-limited turn commits: no state change, retry after the reset.

    A rate limit is the provider asking to come back later, not a failure of
    the goal: it must not count toward failure backoff, so it is a ``wait``.
    """
    started = turn_started_at(envelope)
    wait = retry_after_s(message, started)
    seconds = DEFAULT_RATE_LIMIT_WAIT_S if wait is None else wait
    seconds = min(max(seconds, MIN_RATE_LIMIT_WAIT_S), MAX_RATE_LIMIT_WAIT_S)
    retry_at = started + timedelta(seconds=seconds)
    return HostResult(
        kind=ResultKind.WAIT,
        summary=f"{host} is rate limited; retrying after {retry_at:%Y-%m-%d %H:%M} UTC: "
        f"{message.strip()[:300]}",
        wait_seconds=seconds,
        evidence=[FailureReason.HOST_RATE_LIMITED.value],
        turn_key=envelope.turn_key,
        goal_id=envelope.goal_id,
    )


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
        case _:
            return TurnFailure.of(default, f"{host}: {text}")
