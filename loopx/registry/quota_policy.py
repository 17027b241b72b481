"""A goal's compute quota policy: its share of a sliding window, caps and host guards.

The window and its allowance are defined here once: the window ending at
``now`` is ``(now - window_hours, now]`` and its wall-time allowance is
``compute x window_hours x 3600`` seconds (a duty cycle).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Annotated, Final

from pydantic import Field

from loopx.model import Record

# Policy numbers must be finite: JSON has no Infinity/NaN, so one would make
# registry.json unreadable after it was written.
PositiveFloat = Annotated[float, Field(gt=0, allow_inf_nan=False)]
PositiveInt = Annotated[int, Field(gt=0)]

# Window lengths by window_hours: a status refresh asks each goal's several times, and
# building a timedelta costs more than looking one up (they are immutable, so shared).
_WINDOWS: dict[float, timedelta] = {}
_WINDOWS_MAX: Final = 64


class QuotaPolicy(Record):
    """A goal's compute budget per window and the host guards checked before each turn."""

    compute: Annotated[
        float,
        Field(
            ge=0.0,
            le=1.0,
            allow_inf_nan=False,
            description="share of each window the goal's turns may run, 0..1; 0 pauses it",
        ),
    ] = 1.0
    window_hours: Annotated[
        PositiveFloat, Field(description="length of the sliding quota window in hours, > 0")
    ] = 24.0
    cpu_seconds: Annotated[
        PositiveFloat | None, Field(description="CPU-seconds cap per window, > 0")
    ] = None
    turn_timeout_s: Annotated[
        PositiveFloat, Field(description="seconds one turn's host may run before it is killed, > 0")
    ] = 1800.0
    stall_timeout_s: Annotated[
        PositiveFloat | None,
        Field(
            description="seconds a turn's host may write nothing before it counts as stalled, > 0; "
            "null: 300 for hosts that stream a sign of life (claude, codex), none for others"
        ),
    ] = None
    max_rss_mb: Annotated[
        PositiveInt | None,
        Field(description="peak RSS of a turn's host process tree in MB before it is killed, > 0"),
    ] = None
    min_free_memory_mb: Annotated[
        PositiveInt | None,
        Field(description="host guard: no turn starts with less memory available, in MB, > 0"),
    ] = None
    max_load_per_cpu: Annotated[
        PositiveFloat | None,
        Field(description="host guard: no turn starts above this 1-minute load per CPU, > 0"),
    ] = None
    max_tokens: Annotated[
        PositiveInt | None,
        Field(description="tokens per window, from the host's reported usage, > 0"),
    ] = None
    max_cost_usd: Annotated[
        PositiveFloat | None,
        Field(description="cost in USD per window, from the host's reported usage, > 0"),
    ] = None

    @property
    def window(self) -> timedelta:
        """The window's length."""
        hours = self.window_hours
        window = _WINDOWS.get(hours)
        if window is None:
            if len(_WINDOWS) >= _WINDOWS_MAX:
                _WINDOWS.clear()
            window = _WINDOWS[hours] = timedelta(hours=hours)
        return window

    @property
    def allowance_wall_s(self) -> float:
        """Seconds of turn wall time the goal may spend per window."""
        return self.compute * self.window_hours * 3600.0

    def window_start(self, now: datetime) -> datetime:
        """The exclusive start of the window ending at ``now``."""
        return now - self.window
