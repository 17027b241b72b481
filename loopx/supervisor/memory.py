"""Giving the C heap's free pages back to the system after a refresh that replaced many records.

A status refresh that re-reads most goals (the first one after every goal
changed, 100,000 at a time) frees the views it replaces in place, scattered
between the live ones; the C allocator keeps those pages, so a long-lived
supervisor stayed at the peak of that refresh (650 MiB against about 450 MiB
at 100,000 goals). ``malloc_trim`` returns them. Only glibc has it;
elsewhere this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from collections.abc import Callable
from typing import Final

TRIM_AFTER_REREAD: Final = 1000  # goals re-read by one refresh before its freed pages are returned


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        trim: Callable[[int], int] = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):
        return None
    return trim


def return_freed_memory() -> bool:
    """Give the heap's free pages back to the system; whether this platform could."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
