"""Goal fingerprints by one ``stat`` of the goal directory, for long-lived refreshers.

Every LoopX write of a goal's state, lease, policy or journal replaces,
creates or removes a file in the goal's directory (atomic rename, exclusive
create, unlink), which moves the directory's mtime; a turn's appends to
``history.jsonl`` and ``quota.jsonl`` happen under a lease whose creation and
removal move it too. So while a goal directory's ``(inode, mtime_ns)`` stays
the same, its fingerprint (:func:`loopx.status.fingerprint.goal_fingerprint`, a
scan of the directory and a ``stat`` per file, about six times dearer) does too.

Two limits keep that honest:

* a directory whose mtime is within ``RACY_NS`` of now is not trusted: a second
  change in the same clock tick would leave the same mtime;
* an append or in-place edit that moves no directory (a person editing a file
  by hand, without a hint) is caught when the remembered fingerprint expires,
  after ``deep_after_s`` (10 min by default, spread over the second half of
  that so the deep scans do not come all at once).
"""

from __future__ import annotations

import os
import random
import time
from typing import Final

from loopx.status.fingerprint import Fingerprint, goal_fingerprint

RACY_NS: Final = 2_000_000_000  # a directory changed this recently may change again unseen
DEFAULT_DEEP_S: Final = 600.0

DirStat = tuple[int, int]  # (inode, mtime_ns) of a directory


def dir_stat(path: str) -> DirStat | None:
    """``(inode, mtime_ns)`` of a directory; None when absent or changed within ``RACY_NS``."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    if time.time_ns() - st.st_mtime_ns < RACY_NS:
        return None
    return st.st_ino, st.st_mtime_ns


class FingerprintMemo:
    """:func:`goal_fingerprint`, remembered while the goal's directory does not move.

    For a process that fingerprints the same goals again and again (the
    supervisor's status refresh): one ``stat`` per unchanged goal.
    """

    def __init__(self, *, deep_after_s: float = DEFAULT_DEEP_S) -> None:
        self._deep_ns = int(deep_after_s * 1e9)
        # key -> (inode, mtime_ns, fp, until): flat, one tuple a goal (100,000 in a supervisor)
        self._seen: dict[str, tuple[int, int, Fingerprint, int]] = {}

    def fingerprint(
        self,
        goal_dir: str,
        *,
        exact: bool = False,
        known: Fingerprint | None = None,
        key: str | None = None,
    ) -> Fingerprint:
        """The goal's fingerprint: a remembered one while its directory has not moved.

        ``exact`` reads it afresh whatever the directory says (a hinted or
        leased goal, whose appends during a turn move no directory) and
        remembers the answer. ``known`` is the caller's copy: remembered and
        returned instead of an equal one read, so the two hold one tuple. ``key``
        (default ``goal_dir``) names the entry: the caller's goal id, a string it holds anyway.
        """
        key = goal_dir if key is None else key
        stat = dir_stat(goal_dir)
        seen = self._seen.get(key)
        now_ns = time.time_ns()
        if (
            not exact
            and seen is not None
            and stat is not None
            and stat[0] == seen[0]
            and stat[1] == seen[1]
            and now_ns < seen[3]
        ):
            return seen[2]
        fp = goal_fingerprint(goal_dir)
        if fp == known and known is not None:
            fp = known
        if stat is None:
            self._seen.pop(key, None)
        else:
            until = now_ns + int(self._deep_ns * random.uniform(0.5, 1.0))  # noqa: S311 - spread
            self._seen[key] = (stat[0], stat[1], fp, until)
        return fp
