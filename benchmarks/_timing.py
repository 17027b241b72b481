"""Timing what the in-process benchmarks share.

Every benchmark runs as a script (``python benchmarks/x.py``), so this
folder is on ``sys.path`` and they import it as ``from _timing import ...``.
"""

from __future__ import annotations

import time
from collections.abc import Callable


def lowest(passes: int, run: Callable[[], object]) -> float:
    """The lowest wall time of ``passes`` calls of ``run``."""
    best = float("inf")
    for _ in range(passes):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best
