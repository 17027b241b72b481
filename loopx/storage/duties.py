"""The duties of a long-running loop that a resource error degrades instead of ending it.

No loop of the supervisor, the agents or the server may die on a resource
error (EMFILE, ENFILE, ENOMEM or a ``MemoryError``, ENOSPC, EDQUOT, EROFS,
EIO): each of its duties (the supervisor's slots, status refresh,
idle check and gc; an agent's step and heartbeat) runs through
:meth:`Duties.run`, which turns such an error into a recorded fault of that
duty, logs it once, and clears it (logged too) at the duty's first pass
afterwards. :attr:`Duties.reason` is what the loop publishes as
``degraded`` (its record or heartbeat, sd_notify ``STATUS=``, and so
``loopx status`` and ``/healthz``). Any other error still ends the loop: a
bug must be seen.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TypeVar

from loopx.errors import loop_fault
from loopx.faults import loop_fault_point
from loopx.log import get_logger

log = get_logger(__name__)
T = TypeVar("T")


class Duties:
    """The faults of one loop's duties now, by duty name."""

    def __init__(self, owner: str) -> None:
        """Duties of the loop ``owner`` (``supervisor``, ``agent``): its log events' prefix."""
        self.owner = owner
        self.faults: dict[str, str] = {}

    def run(self, duty: str, step: Callable[[], T]) -> T | None:
        """One pass of ``duty``; None when a resource error stopped it (recorded, logged once).

        The fault point ``<owner>:<duty>`` (``LOOPX_FAULT=loop:...``) fires here.

        Raises:
            BaseException: whatever ``step`` raises that is no resource error.

        """
        try:
            loop_fault_point(f"{self.owner}:{duty}")
            result = step()
        except (OSError, MemoryError) as e:
            reason = loop_fault(e)
            if reason is None:
                raise
            self.failed(duty, reason)
            return None
        self.passed(duty)
        return result

    def failed(self, duty: str, reason: str) -> None:
        """Record that ``duty`` failed for ``reason`` (logged when it starts failing or changes)."""
        if self.faults.get(duty) != reason:
            self.faults[duty] = reason
            _log_safely("warning", f"{self.owner}_duty_degraded", duty=duty, reason=reason)

    def passed(self, duty: str) -> None:
        """Record that ``duty`` passed (logged when it failed before)."""
        was = self.faults.pop(duty, None)
        if was is not None:
            _log_safely("info", f"{self.owner}_duty_recovered", duty=duty, was=was)

    @property
    def reason(self) -> str | None:
        """``<duty>: <reason>`` of every failing duty, or None when all pass."""
        if not self.faults:
            return None
        return "; ".join(f"{duty}: {reason}" for duty, reason in sorted(self.faults.items()))


def _log_safely(level: str, event: str, **fields: str) -> None:
    # Without descriptors or memory the log line may fail too; the record says it then.
    with contextlib.suppress(Exception):
        getattr(log, level)(event, **fields)


__all__ = ["Duties"]
