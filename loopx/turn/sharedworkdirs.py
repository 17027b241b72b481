"""Goals whose workdirs overlap: the warning ``goal add`` gives (pure).

Overlap: the same directory, or one inside the other. Such goals never run
turns at the same time (:mod:`loopx.turn.workdir` locks the workdir), so
``goal add`` names them.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator
from itertools import islice
from typing import Final

from loopx.registry.goalrecords import Goal
from loopx.turn.workdirfiles import ancestors


def has_worktree(goal: Goal) -> bool:
    """Whether the goal runs in a worktree of its own (`goal add --worktree`)."""
    return goal.worktree is not None


SHARED_NAMED: Final = 10  # ids named per goal: 10,000 goals in one folder are not 10,000 lists


def shared_workdirs(
    new: Iterable[Goal], in_use: Iterable[tuple[str, str]], *, limit: int = SHARED_NAMED
) -> dict[str, list[str]]:
    """For each new goal without a worktree, up to ``limit`` other goals whose workdir overlaps. Pure.

    ``in_use`` is ``(workdir, id)`` of every registered goal that turns in its
    own workdir (:meth:`loopx.registry.catalog.GoalCatalog.own_workdirs`: not
    archived, no worktree); the new goals' own pairs in it are passed over.
    Overlap: the same directory, or one inside the other (workdirs are stored
    resolved, so no path is looked up). Costs one sort of the workdirs and a
    bisection per new goal, and at most ``limit`` ids a goal: the ones in the
    same directory first, then those inside it, then those above it, each by id.
    """
    new = [g for g in new if not has_worktree(g)]
    ids = {g.id for g in new}
    pairs = [(w, i) for w, i in in_use if i not in ids] + [(g.workdir, g.id) for g in new]
    pool = sorted((w.rstrip("/") or "/", i) for w, i in pairs)
    paths = [p for p, _ in pool]
    out: dict[str, list[str]] = {}
    for goal in new:
        found = list(islice(_overlapping(pool, paths, goal), limit))
        if found:
            out[goal.id] = sorted(found)
    return out


def _overlapping(pool: list[tuple[str, str]], paths: list[str], goal: Goal) -> Iterator[str]:
    """The ids of the other goals whose workdir overlaps ``goal``'s, lazily, each once."""
    mine = goal.workdir.rstrip("/") or "/"
    seen = {goal.id}
    # The paths inside it sort between "<mine>/" and "<mine>0" ("0" follows "/").
    inside = range(
        bisect_left(paths, mine.rstrip("/") + "/"), bisect_left(paths, mine.rstrip("/") + "0")
    )
    ranges = [_equal(paths, mine), inside]
    ranges += [_equal(paths, ancestor) for ancestor in ancestors(mine)]
    for positions in ranges:
        for i in positions:
            goal_id = pool[i][1]
            if goal_id not in seen:
                seen.add(goal_id)
                yield goal_id


def _equal(paths: list[str], path: str) -> range:
    """The positions of ``path`` in the sorted ``paths``."""
    return range(bisect_left(paths, path), bisect_right(paths, path))
