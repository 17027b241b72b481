"""The host's available memory, 1-minute load and CPU count, read with the standard library.

The one measurement behind :class:`loopx.quota.headroom.HostHeadroom`: the
quota decision and the warm ``loopx quota should-run`` (:mod:`loopx.quota.warmanswer`,
which must not import psutil) both call :func:`host_numbers`. On Linux the
numbers are psutil's exactly: ``virtual_memory().available`` is ``MemAvailable``
of ``/proc/meminfo`` (the free memory when it exceeds the total, as in a
container), ``getloadavg`` is :func:`os.getloadavg` and ``cpu_count(logical=True)``
is ``sysconf(SC_NPROCESSORS_ONLN)``. Where ``/proc/meminfo`` cannot tell, it
answers None and the caller asks psutil.
"""

from __future__ import annotations

import os
from collections import namedtuple

TYPE_CHECKING = False  # not `typing`: a warm `quota should-run` must not pay for it
if TYPE_CHECKING:
    from typing import Final, NamedTuple

_MEMINFO: Final = "/proc/meminfo"
_MB: Final = 1024 * 1024


# A namedtuple: no `typing` (nor `dataclasses`, which pulls in `inspect`) on the warm path;
# the checker is shown the same fields.
if TYPE_CHECKING:

    class HostNumbers(NamedTuple):
        """What the host has for one more turn, now."""

        available_memory_mb: float
        load_1m: float
        cpu_count: int

else:
    HostNumbers = namedtuple(  # noqa: PYI024 - see above
        "HostNumbers", ("available_memory_mb", "load_1m", "cpu_count")
    )
    HostNumbers.__doc__ = "What the host has for one more turn, now."


def _available_bytes() -> int | None:
    """``MemAvailable`` in bytes as psutil reads it, or None without a usable /proc/meminfo."""
    fields: dict[bytes, int] = {}
    try:
        with open(_MEMINFO, "rb") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 2 and parts[0] in (b"MemTotal:", b"MemFree:", b"MemAvailable:"):  # noqa: PLR2004
                    fields[parts[0]] = int(parts[1]) * 1024
    except (OSError, ValueError):
        return None
    available = fields.get(b"MemAvailable:")
    total, free = fields.get(b"MemTotal:"), fields.get(b"MemFree:")
    if not available or total is None or free is None:
        return None  # an old kernel (or a 0, a kernel bug): psutil estimates it
    return free if available > total else available


def cpu_count() -> int:
    """Logical CPUs online; one when the platform cannot tell (it makes the host look busier)."""
    try:
        n = os.sysconf("SC_NPROCESSORS_ONLN")
    except (ValueError, OSError, AttributeError):
        n = 0
    return n if n >= 1 else (os.cpu_count() or 1)


def host_numbers() -> HostNumbers | None:
    """Available memory (MB), 1-minute load and logical CPUs; None where /proc cannot tell."""
    available = _available_bytes()
    if available is None:
        return None
    try:
        load_1m = os.getloadavg()[0]
    except OSError:
        return None
    return HostNumbers(available / _MB, load_1m, cpu_count())


__all__ = ["HostNumbers", "cpu_count", "host_numbers"]
