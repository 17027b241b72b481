"""Why a turn failed: one typed reason per case a caller (scheduler, status, human) treats apart."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Final

from loopx.model import Record, UtcDatetime

# Evidence beside ``host_rate_limited`` when the provider said no reset time (a bare 429): the
# account backs off by itself (loopx.accounts.rules) instead of waiting for a reset.
RESET_UNKNOWN: Final = "rate_limit_reset_unknown"


class FailureReason(StrEnum):
    """The reason code of a `failed` (or `stopped`) turn."""

    HOST_INTERRUPTED = "host_interrupted"  # the agent died while the host ran; no attempts left
    HOST_EXIT = "host_exit"  # the host exited non-zero (or by a signal) without a result
    HOST_MISSING = "host_missing"  # the host program is not installed / not on PATH
    NO_RESULT = "no_result"  # the host exited 0 but wrote no result
    INVALID_RESULT = "invalid_result"  # the result is not JSON or not the schema
    VALIDATION = "validation"  # identity mismatch or a disallowed kind/patch
    TURN_TIMEOUT = "turn_timeout"  # killed past turn_timeout_s
    QUOTA_MEMORY_EXCEEDED = "quota_memory_exceeded"  # killed past max_rss_mb
    LEASE_LOST = "lease_lost"  # a newer epoch took the goal; nothing written
    STOPPED = "stopped"  # a stop request ended the turn at a safe point
    HOST_AUTH = "host_auth"  # the host CLI is not logged in / the key is rejected
    HOST_RATE_LIMITED = "host_rate_limited"  # the provider asked us to retry later
    HOST_UNREACHABLE = "host_unreachable"  # the host could not reach its model server
    HOST_SERVER_ERROR = (
        "host_server_error"  # the model server answered 5xx (after the CLI's retries)
    )
    HOST_STALLED = "host_stalled"  # no sign of life for the stall timeout, or its own idle timeout
    HOST_MAX_TURNS = "host_max_turns"  # the CLI hit its own turn limit (claude error_max_turns)
    HOST_EXECUTION_ERROR = "host_execution_error"  # the CLI reported an error mid-run
    MALFORMED_OUTPUT = "malformed_output"  # the CLI's own output format could not be parsed
    ROOT_TAMPERED = "root_tampered"  # the host changed LoopX's files in the runtime root


class TurnFailure(Record):
    """A typed failure: the reason code, one human sentence, and an optional retry time."""

    reason: FailureReason
    message: str
    retry_at: UtcDatetime | None = None  # e.g. a rate limit's reset time

    @classmethod
    def of(
        cls, reason: FailureReason, message: str, retry_at: datetime | None = None
    ) -> TurnFailure:
        """Shorthand constructor."""
        return cls(reason=reason, message=message, retry_at=retry_at)
