"""Timing what the in-process benchmarks share.

Every benchmark runs as a script (``python benchmarks/x.py``), so this
folder is on ``sys.path`` and they import it as ``from _timing import ...``.
"""

from __future__ import annotations

import time
from collections.abc import Callable


def lowest(
    passes: int, run: Callable[[], object], *, clock: Callable[[], float] = time.perf_counter
) -> float:
    """The lowest time of ``passes`` calls of ``run``: wall time, or ``clock``'s (``process_time``)."""
    best = float("inf")
    for _ in range(passes):
        start = clock()
        run()
        best = min(best, clock() - start)
    return best
