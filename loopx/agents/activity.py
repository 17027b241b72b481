"""A host's sign of life in the files it is known to write (its session records).

A host whose pipes stay quiet may still be working: Codex appends to its
session file, Claude Code to its project's transcript. The turn runner asks
:func:`newest_mtime` only once the pipes have been quiet past the stall
timeout, so a working host is not stopped as stalled.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from typing import Final

_MOST_WALKED: Final = 10_000  # entries of a host's activity folders looked at, at most


def newest_mtime(paths: Iterable[str], *, most: int = _MOST_WALKED) -> float | None:
    """The newest modification time of a file at or under ``paths`` (None: none there).

    Bounded: at most ``most`` entries are looked at, newest folders first, so a
    home holding years of sessions costs a bounded walk.
    """
    newest: float | None = None
    seen = 0
    stack = list(paths)
    while stack and seen < most:
        path = stack.pop()
        try:
            with os.scandir(path) as entries:
                listed = sorted(entries, key=lambda e: e.name)
        except NotADirectoryError:
            with contextlib.suppress(OSError):
                mtime = os.stat(path).st_mtime
                newest = mtime if newest is None else max(newest, mtime)
            continue
        except OSError:
            continue
        for entry in listed:
            seen += 1
            try:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)  # the last listed (newest by name) walked first
                elif entry.is_file(follow_symlinks=False):
                    mtime = entry.stat(follow_symlinks=False).st_mtime
                    newest = mtime if newest is None else max(newest, mtime)
            except OSError:
                continue
    return newest


__all__ = ["newest_mtime"]
