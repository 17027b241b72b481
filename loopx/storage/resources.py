"""Resource faults: a write refused by the machine (disk full, quota, read-only, I/O error).

Such a fault is weathered, not fatal: the supervisor and agents wait and
retry with backoff, report ``degraded`` with the reason, and resume by
themselves once the condition clears (docs/reliability.md). This module
says which errors are such faults (pure) and how healthy the root's
filesystem looks right now (``statvfs``), for status.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Final

from loopx.errors import LoopxError

RESOURCE_ERRNOS: Final = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO})
# Less free space than this on the root's filesystem reads as full: an atomic
# write of a journal needs a few hundred KiB at most.
LOW_SPACE_BYTES: Final = 1024 * 1024
_REASONS: Final = {
    errno.ENOSPC: "disk full",
    errno.EDQUOT: "disk quota exceeded",
    errno.EROFS: "read-only filesystem",
    errno.EIO: "I/O error",
}


def resource_fault(error: BaseException) -> str | None:
    """The reason when ``error`` is a write the machine refused, else None. Pure."""
    if isinstance(error, ResourceFaultError):
        return error.reason
    if isinstance(error, OSError) and error.errno in RESOURCE_ERRNOS:
        where = f" ({error.filename})" if error.filename else ""
        return f"{_REASONS[error.errno]}{where}"
    return None


class ResourceFaultError(LoopxError):
    """A write was refused by the machine (disk full, quota, read-only, I/O error)."""

    def __init__(self, reason: str, doing: str) -> None:
        super().__init__(
            f"could not {doing}: {reason}",
            hint="free space on the disk holding the runtime root (`df -h ROOT`) or fix "
            "the filesystem; nothing was lost, run the command again afterwards",
        )
        self.reason = reason
        self.doing = doing


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


__all__ = [
    "RESOURCE_ERRNOS",
    "ResourceFaultError",
    "resource_fault",
    "retry_delay",
    "root_health",
]
