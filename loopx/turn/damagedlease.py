"""A lease file that cannot be read: how long it still blocks its goal.

A claim (:func:`loopx.turn.lease.claim`) and recovery take such a file over
once these rules say so, with the epoch raised like any takeover.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path


def damaged_lease_free_at(
    size: int, modified_at: datetime, *, ttl_s: float, grace_s: float
) -> datetime | None:
    """When a lease file that cannot be read stops blocking its goal; None: at once. Pure.

    An empty file is what a create that failed half-way leaves (ENOSPC):
    nobody holds it. Other damage may be a writer we cannot see (another
    machine, soft locks), so it is respected for one lease duration plus the
    grace after its last change, like a lease that stopped being renewed.
    """
    if size == 0:
        return None
    return modified_at + timedelta(seconds=ttl_s + grace_s)


def damaged_lease_blocks_until(
    path: Path, *, now: datetime, ttl_s: float, grace_s: float
) -> datetime | None:
    """For a lease file that failed to parse: until when it blocks a claim (None: free now)."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    free_at = damaged_lease_free_at(
        st.st_size, datetime.fromtimestamp(st.st_mtime, tz=UTC), ttl_s=ttl_s, grace_s=grace_s
    )
    return free_at if free_at is not None and now < free_at else None
