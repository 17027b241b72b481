"""Disk limits: a size quota on the root and a free-space floor, below which no new turn starts.

The free space is read live (one ``statvfs``). The root's size takes a walk
of the whole root, so it is measured at most every ``SIZE_MAX_AGE_S`` (by the
supervisor's gc duty, or by whoever asks first) and kept in
``projections/space.json``. :func:`space_problem` is the pure decision.
"""

from __future__ import annotations

import contextlib
import os
from datetime import datetime, timedelta
from typing import Final, Literal, NamedTuple

from loopx.errors import LoopxError
from loopx.log import get_logger
from loopx.model import Record, UtcDatetime
from loopx.retention.policy import DEFAULT_MIN_FREE_DISK_MB, RetentionSettings, load_settings
from loopx.root import Layout
from loopx.storage.files import atomic_write_model, read_model_or_none
from loopx.storage.resources import root_health

log = get_logger(__name__)

SPACE_NAME: Final = "space.json"  # in projections/
SIZE_MAX_AGE_S: Final = 60.0
MIB: Final = 1024 * 1024


class SpaceReading(Record):
    """``projections/space.json``: the root's size when last measured."""

    schema_version: Literal[1] = 1
    root_bytes: int  # allocated on disk (st_blocks), as `du` counts
    root_files: int
    measured_at: UtcDatetime


def floor_bytes(settings: RetentionSettings, total_bytes: int) -> int:
    """The free-space floor: the one set, else 64 MB or a tenth of the filesystem if smaller. Pure.

    The tenth keeps a small disk (a 32 MB tmpfs, a CI machine's scratch volume) usable.
    """
    if settings.min_free_disk_mb is not None:
        return settings.min_free_disk_mb * MIB
    return min(DEFAULT_MIN_FREE_DISK_MB * MIB, total_bytes // 10)


def space_problem(
    settings: RetentionSettings, *, disk: DiskSpace | None, reading: SpaceReading | None
) -> str | None:
    """Why no new turn may start for lack of space, with the figures; None if space is fine. Pure.

    Refusals in precedence order: the free-space floor, then the root's size quota.
    """
    floor = floor_bytes(settings, disk.total) if disk is not None else 0
    if disk is not None and disk.free < floor:
        return (
            f"free space on the root's filesystem is {disk.free / MIB:.0f} MB, below the floor "
            f"of {floor / MIB:.0f} MB; no new turn starts until space is freed "
            "(`loopx gc`, or `loopx retention set --min-free-disk-mb N`)"
        )
    quota = settings.max_root_mb
    if quota is not None and reading is not None and reading.root_bytes > quota * MIB:
        return (
            f"the root holds {reading.root_bytes / MIB:.0f} MB in {reading.root_files} files, "
            f"over its quota of {quota} MB; no new turn starts until `loopx gc` brings it "
            "under (or `loopx retention set --max-root-mb N`)"
        )
    return None


class DiskSpace(NamedTuple):
    """The root's filesystem: bytes free for unprivileged writers, and its size."""

    free: int
    total: int


def disk_space(layout: Layout) -> DiskSpace | None:
    """The root filesystem's free space and size (one ``statvfs``); None if unreadable."""
    try:
        st = os.statvfs(layout.root)
    except OSError:
        return None
    return DiskSpace(free=st.f_bavail * st.f_frsize, total=st.f_blocks * st.f_frsize)


def measure(layout: Layout, *, now: datetime) -> SpaceReading:
    """Walk the root (symlinks not followed) and record its size."""
    total = files = 0
    stack = [str(layout.root)]
    while stack:
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue  # vanished or unreadable meanwhile: counted at the next walk
        for entry in entries:
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            total += st.st_blocks * 512
            files += 1
            if entry.is_dir(follow_symlinks=False):
                stack.append(entry.path)
    return SpaceReading(root_bytes=total, root_files=files, measured_at=now)


def read_reading(layout: Layout) -> SpaceReading | None:
    """The last recorded measurement; None if there is none or it cannot be read (a cache)."""
    try:
        return read_model_or_none(layout.projections_dir / SPACE_NAME, SpaceReading)
    except (LoopxError, OSError):
        return None


def current_reading(
    layout: Layout, *, now: datetime, max_age_s: float = SIZE_MAX_AGE_S
) -> SpaceReading:
    """The recorded measurement if it is fresh, else a new one (recorded, best effort)."""
    reading = read_reading(layout)
    if reading is not None and now - reading.measured_at <= timedelta(seconds=max_age_s):
        return reading
    reading = measure(layout, now=now)
    # A full disk is what this is about: unrecorded, the figure is still right for this caller.
    with contextlib.suppress(OSError):
        atomic_write_model(layout.projections_dir / SPACE_NAME, reading, durable=False)
    return reading


def check_space(layout: Layout, *, now: datetime) -> str | None:
    """:func:`space_problem` for the root now (settings, live free space, the size if quota'd)."""
    try:
        settings = load_settings(layout)
    except (LoopxError, OSError) as e:
        # doctor reports the damaged file; meanwhile the default limits still hold.
        log.warning("retention_settings_unreadable", error=str(e))
        settings = RetentionSettings()
    reading = current_reading(layout, now=now) if settings.max_root_mb is not None else None
    return space_problem(settings, disk=disk_space(layout), reading=reading)


def root_problem(layout: Layout, *, now: datetime) -> str | None:
    """Why the root takes no new turns now: writes refused (full, read-only), else its limits."""
    return root_health(layout.root) or check_space(layout, now=now)


__all__ = [
    "DiskSpace",
    "SpaceReading",
    "check_space",
    "current_reading",
    "disk_space",
    "floor_bytes",
    "measure",
    "read_reading",
    "root_problem",
    "space_problem",
]
