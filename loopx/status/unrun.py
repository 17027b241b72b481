"""Cache entries of goals that never ran, made in bulk: most goals of a cold refresh.

Such a goal has no file but its goal file (and perhaps an empty ``turns/``),
no quarantined journal, no probe and no earlier entry: its view is its
policy's (:func:`~loopx.status.projection.project_unrun`) and its entry is the
one :func:`~loopx.status.reread.reread_goal` would store, made here without
the per-goal calls that dominated a cold refresh of 10,000 goals. The tests compare these entries with the one-by-one path's.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from datetime import datetime
from typing import Final

from loopx.registry.model import Goal
from loopx.status.fingerprint import ABSENT_SIZE, FINGERPRINT_NAMES, Fingerprint
from loopx.status.projection import project_unrun
from loopx.status.refresh import CachedGoal
from loopx.status.sources import NO_COUNTS, READ_NAMES
from loopx.status.view import GoalStatusView, ProbeObservation, trusted

_SIZE_AT: Final = {name: 3 * i + 2 for i, name in enumerate(FINGERPRINT_NAMES)}
# The sizes of the files the refresh would read: all missing means nothing to open.
_READ_SIZES: Final = operator.itemgetter(*sorted(_SIZE_AT[n] for n in READ_NAMES))
_NONE_READ: Final = (ABSENT_SIZE,) * len(READ_NAMES)
# The epoch file besides them: missing too, the entry is stored compactly (shards.never_ran).
_EPOCH_SIZE: Final = _SIZE_AT["epoch"]
_FINGERPRINT_LEN: Final = 3 * len(FINGERPRINT_NAMES)


def recheck_ts(view: GoalStatusView) -> float | None:
    """``view.recheck_at`` as POSIX seconds (an entry's ``recheck_ts``)."""
    at = view.recheck_at
    return at.timestamp() if at is not None else None


def unrun_entry(fp: list[int], view: GoalStatusView) -> CachedGoal:
    """The cache entry of a goal with no file but its goal file (its view validated already)."""
    return trusted(
        CachedGoal,
        {
            "fingerprint": fp,
            "view": view,
            "history": NO_COUNTS,
            "epoch": 0,
            "recheck_ts": recheck_ts(view),
        },
    )


def plain_unrun(
    goal_id: str,
    fp: Fingerprint | None,
    *,
    cached: Mapping[str, CachedGoal],
    quarantine: Mapping[str, tuple[str, ...]],
    probes: Mapping[str, ProbeObservation] | None,
) -> bool:
    """Whether the goal's entry is :func:`bulk_entry`'s: nothing to read, nothing to say but its policy.

    ``probes`` None: not re-read this refresh (a goal with no entry has no probe then).
    """
    return (
        fp is not None
        and len(fp) == _FINGERPRINT_LEN
        and _READ_SIZES(fp) == _NONE_READ
        and goal_id not in cached
        and not quarantine.get(goal_id)
        and (probes is None or probes.get(goal_id) is None)
    )


def bulk_entry(goal: Goal, fp: Fingerprint, *, now: datetime) -> tuple[CachedGoal, bool]:
    """The entry of a goal :func:`plain_unrun` accepts, and whether it is stored compactly."""
    return unrun_entry(list(fp), project_unrun(goal, now=now)), fp[_EPOCH_SIZE] == ABSENT_SIZE
