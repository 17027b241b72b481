"""Stopping a host that only repeats that it is stuck, before the turn timeout.

Codex 0.171 with its model server unreachable prints ``Reconnecting...
waiting for network`` over and over and never exits. An adapter names such a
line in :class:`StallWatch`; the turn runner stops the host once every line
it printed for ``after_s`` seconds matched, and the adapter then reads the
output (which ends in those lines) as a typed failure.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Annotated, Protocol

from pydantic import Field

from loopx.model import Record

DEFAULT_UNREACHABLE_AFTER_S = 120.0  # HostSpec.unreachable_after_s unset


class StallWatch(Record):
    """Stop the host when its output has said only ``pattern`` for ``after_s`` seconds."""

    pattern: str
    after_s: Annotated[float, Field(gt=0, allow_inf_nan=False)]


class _Stream(Protocol):
    kept: bytearray


class StallWatcher:
    """Tracks one run's output against a :class:`StallWatch`; call it with the captured streams."""

    def __init__(self, watch: StallWatch, clock: Callable[[], float] = time.monotonic) -> None:
        self._pattern = re.compile(watch.pattern, re.IGNORECASE)
        self._after_s = watch.after_s
        self._clock = clock
        self._read = [0, 0]  # bytes of stdout, stderr already looked at
        self._since: float | None = None  # when the current run of matching lines began

    def __call__(self, stdout: _Stream, stderr: _Stream) -> bool:
        """Whether the host has been stuck for ``after_s``: it should be stopped now."""
        now = self._clock()
        for i, stream in enumerate((stdout, stderr)):
            end = stream.kept.rfind(b"\n") + 1
            if end <= self._read[i]:
                continue
            for raw in bytes(stream.kept[self._read[i] : end]).splitlines():
                line = raw.decode("utf-8", errors="replace").strip()
                if not line:
                    continue
                if self._pattern.search(line):
                    self._since = now if self._since is None else self._since
                else:
                    self._since = None
            self._read[i] = end
        return self._since is not None and now - self._since >= self._after_s
