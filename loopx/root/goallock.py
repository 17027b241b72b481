"""The goal's lock (``goals/<id>/epoch.lock``): claims, takeovers and fenced writes serialise here.

Below the turn layer that claims leases under it and the clock repair that
rewrites a goal's state under it; it knows only the root's layout.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from loopx.root import Layout
from loopx.storage.locks import locked


@contextlib.contextmanager
def goal_lock(layout: Layout, goal_id: str) -> Iterator[None]:
    """Hold the goal's lock: claims, takeovers and fenced writes serialise here."""
    layout.ensure_goal_dirs(goal_id)
    with locked(layout.epoch_file(goal_id)):
        yield
