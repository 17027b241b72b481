"""Where and how often `loopx serve` serves by default: a leaf, so the API's signatures need no HTTP stack."""

from __future__ import annotations

from typing import Final

DEFAULT_HOST: Final = "127.0.0.1"
DEFAULT_PORT: Final = 8765
# The dashboard promises a committed turn on screen within 2 s, so serve re-checks every second
# (a refresh reads the change hints, not every goal).
SERVE_TTL_S: Final = 1.0
SERVE_REFRESH_S: Final = 1.0
