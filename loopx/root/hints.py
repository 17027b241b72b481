"""Change hints: writers note which goal changed, so readers skip unchanged goals.

``projections/changes.log`` holds one goal id per line. It is a hint, not a
record: a lost line costs status freshness until the next full scan, never
correctness, so writing it is one unsynced append and errors are ignored.

Every layer that writes a goal's files writes a hint (the registry, the
state, the turn, the status probes), and the status cache, the goal catalog
and the schedule index read them, so this module sits below all of them: it
knows only the root's layout.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from loopx.errors import NotRegularFileError, UnsafePathError
from loopx.ids import is_valid_goal_id
from loopx.root import Layout
from loopx.storage.files import open_regular

CHANGES_NAME: Final = "changes.log"


def changes_file(layout: Layout) -> Path:
    """``projections/changes.log``."""
    return layout.projections_dir / CHANGES_NAME


def note_goal_changed(layout: Layout, goal_id: str) -> None:
    """Tell status refreshes that ``goal_id``'s files changed. Cheap, best effort.

    One ``O_APPEND`` write of a short line (atomic for lines this short), no
    fsync; errors are swallowed on purpose (see the module docstring).
    """
    if not is_valid_goal_id(goal_id):
        return
    with contextlib.suppress(OSError):
        fd = os.open(
            changes_file(layout), os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600
        )
        try:
            os.write(fd, goal_id.encode() + b"\n")
        finally:
            os.close(fd)


@dataclass(frozen=True, slots=True)
class HintCursor:
    """Where a reader of the change log stopped: the file's inode and byte offset."""

    inode: int = 0
    offset: int = 0


def hinted_since(layout: Layout, cursor: HintCursor) -> bool:
    """Whether the log holds more than a reader at ``cursor`` has read (one ``stat``)."""
    try:
        st = os.stat(changes_file(layout))
    except FileNotFoundError:
        return cursor.inode != 0
    return st.st_ino != cursor.inode or st.st_size != cursor.offset


def read_hints(layout: Layout, cursor: HintCursor) -> tuple[set[str] | None, HintCursor]:
    """Goal ids noted since ``cursor``; None when the log was replaced (rescan everything).

    The log is truncated by the refresher after a full scan once it grows past
    a megabyte; a new inode or a shorter file means hints may have been lost.
    """
    path = changes_file(layout)
    try:
        fd = open_regular(path)  # no FIFO or device a host planted there
    except FileNotFoundError:
        return (set() if cursor.inode == 0 else None), HintCursor()
    except (UnsafePathError, NotRegularFileError):
        return None, HintCursor()  # not a log LoopX wrote: rescan, as for a replaced log
    try:
        st = os.fstat(fd)
        if cursor.inode not in (0, st.st_ino) or st.st_size < cursor.offset:
            return None, HintCursor(st.st_ino, st.st_size)
        end = st.st_size
        data = os.pread(fd, end - cursor.offset, cursor.offset) if end > cursor.offset else b""
    finally:
        os.close(fd)
    # Only whole lines count; a torn last line is read again next time.
    cut = data.rfind(b"\n") + 1
    ids = {line.decode(errors="replace") for line in data[:cut].split(b"\n") if line}
    return ids, HintCursor(st.st_ino, cursor.offset + cut)


def reset_hints(layout: Layout) -> HintCursor:
    """Start a fresh change log (after a full scan made the old hints moot)."""
    path = changes_file(layout)
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    return HintCursor()
