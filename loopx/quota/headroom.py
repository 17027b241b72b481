"""The host's live headroom: free memory and load, measured before a turn.

The numbers come from :func:`loopx.quota.host.host_numbers` (the standard
library, the same measurement a warm ``loopx quota should-run`` takes); psutil
only where ``/proc`` cannot tell.
"""

from __future__ import annotations

import os
from datetime import datetime
from typing import Annotated, Literal

from pydantic import Field

from loopx.model import Record, UtcDatetime
from loopx.quota.host import HostNumbers, host_numbers


class HostHeadroom(Record):
    """A snapshot of how much room the host has for one more turn.

    ``available_memory_mb`` is what psutil calls ``virtual_memory().available`` (what can
    be given to a new process without swapping), ``load_1m`` the 1-minute load
    average and ``cpu_count`` the logical CPUs it is divided by.
    """

    schema_version: Literal[1] = 1
    available_memory_mb: Annotated[float, Field(ge=0.0)]
    load_1m: Annotated[float, Field(ge=0.0)]
    cpu_count: Annotated[int, Field(ge=1)]
    measured_at: UtcDatetime

    @property
    def load_per_cpu(self) -> float:
        """The 1-minute load average per logical CPU."""
        return self.load_1m / self.cpu_count


def measure_headroom(*, now: datetime) -> HostHeadroom:
    """Measure the host's available memory and load now (tens of µs on Linux)."""
    numbers = host_numbers() or _psutil_numbers()
    return HostHeadroom(
        available_memory_mb=numbers.available_memory_mb,
        load_1m=numbers.load_1m,
        cpu_count=numbers.cpu_count,
        measured_at=now,
    )


def _psutil_numbers() -> HostNumbers:
    """The same numbers from psutil, where ``/proc/meminfo`` is absent or too old."""
    import psutil  # noqa: PLC0415 - only where /proc cannot tell

    # cpu_count() is None when the platform cannot tell; one CPU is the safe
    # assumption for a load guard (it makes the host look busier, not idler).
    cpus = psutil.cpu_count(logical=True) or os.cpu_count() or 1
    return HostNumbers(
        psutil.virtual_memory().available / (1024 * 1024), psutil.getloadavg()[0], cpus
    )
