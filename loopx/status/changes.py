"""Change hints: writers note which goal changed, so status refreshes skip unchanged goals.

``projections/changes.log`` holds one goal id per line. It is a hint, not a
record: a lost line costs status freshness until the next full scan, never
correctness, so writing it is one unsynced append and errors are ignored.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Final

from loopx.ids import is_valid_goal_id
from loopx.root import Layout

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
