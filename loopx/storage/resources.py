"""Resource faults: a write refused by the machine (disk full, quota, read-only, I/O error).

Such a fault is weathered, not fatal: the supervisor and agents wait and
retry with backoff, report ``degraded`` with the reason, and resume by
themselves once the condition clears (docs/reliability.md). This module
says which errors are such faults (pure) and how healthy the root's
filesystem looks right now (``statvfs``), for status.
"""

from __future__ import annotations

import os
from pathlib import Path

# Not `from typing import ...`: a warm `loopx status --json` starts without importing it.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final

# Less free space than this on the root's filesystem reads as full: an atomic
# write of a journal needs a few hundred KiB at most.
LOW_SPACE_BYTES: Final = 1024 * 1024


def root_health(root: Path) -> str | None:
    """Why the root's filesystem cannot take writes now (full, read-only), or None. Reads statvfs."""
    try:
        st = os.statvfs(root)
    except OSError:
        return None
    if st.f_flag & os.ST_RDONLY:
        return "read-only filesystem"
    free = st.f_bavail * st.f_frsize
    if st.f_blocks and free < LOW_SPACE_BYTES:
        return f"disk full ({free // 1024} KiB free)"
    if st.f_files and st.f_favail == 0:
        return "no free inodes"
    return None


def retry_delay(attempt: int, *, base_s: float = 0.5, cap_s: float = 10.0) -> float:
    """How long to wait before retry number ``attempt`` (from 1) of a refused write. Pure."""
    return float(min(cap_s, base_s * 2 ** max(attempt - 1, 0)))


__all__ = ["LOW_SPACE_BYTES", "retry_delay", "root_health"]
