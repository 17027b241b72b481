"""The wording of quota decisions that a warm ``loopx quota should-run`` renders again.

Standard library only: :mod:`loopx.quota.decision` builds its messages with
these functions and :mod:`loopx.quota.warmanswer` fills the holes of a stored
decision that move with the clock with the same ones, so the two cannot
word a decision differently.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not `typing`, nor datetime: a warm `quota should-run` may need neither
if TYPE_CHECKING:
    from datetime import datetime

_WHOLE_SECONDS_FROM = 10  # "12 s" from here, "9.5 s" below


def seconds_phrase(value: float) -> str:
    """A duration in seconds as decisions print it: ``"1,234 s"``, ``"9.5 s"``."""
    return f"{value:,.0f} s" if value >= _WHOLE_SECONDS_FROM else f"{value:,.1f} s"


def in_phrase(at: datetime, now: datetime) -> str:
    """``"(in 3,600 s)"``: how far ``at`` is from ``now``; the end of a waiting message."""
    return f"(in {seconds_phrase((at - now).total_seconds())})"


def should_run_line(*, allowed: bool, reason: str, message: str) -> str:
    """The line `loopx quota should-run` prints (without --json), without its newline."""
    return f"{'yes' if allowed else 'no'} ({reason}): {message}"


__all__ = ["in_phrase", "seconds_phrase", "should_run_line"]
