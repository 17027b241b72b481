"""A goal's fingerprint: ``(inode, mtime_ns, size)`` of each file its status is read from.

Each file's is :func:`loopx.memo.fingerprint`, the project's one spelling of
"this file changed". Standard library only.
"""

from __future__ import annotations

import functools
import os

from loopx.memo import ABSENT, fingerprint

# Not `from typing import ...`: a warm `loopx status --json` starts without importing it.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final

# Files of a goal directory whose (mtime_ns, size) make its fingerprint. The
# turns/ directory's mtime moves whenever a journal is created or rewritten.
FINGERPRINT_NAMES: Final = (
    "goal.json",
    "state.json",
    "lease.json",
    "history.jsonl",
    "quota.jsonl",
    "epoch",
    "turns",
)
ABSENT_SIZE: Final = ABSENT[2]  # a missing file's size in a fingerprint
_SLOT: Final = {name: 3 * i for i, name in enumerate(FINGERPRINT_NAMES)}  # offset in a fingerprint
_FINGERPRINTED: Final = frozenset(FINGERPRINT_NAMES)
_NO_FILES: Final = ABSENT * len(FINGERPRINT_NAMES)

Fingerprint = tuple[int, ...]


def goal_fingerprint(goal_dir: str) -> Fingerprint:
    """``(inode, mtime_ns, size)`` of each of the goal's status files: one listing, one ``lstat`` each.

    The inode catches an atomic rewrite of the same size within one mtime tick
    (every atomic write renames a new inode into place). Missing files count
    as ``(0, 0, -1)``; a missing goal directory gives ``()``.
    """
    # A listing and an lstat of the names present, not os.scandir: its DirEntry
    # objects cost more than they save here, where most entries are not ours.
    try:
        present = _FINGERPRINTED.intersection(os.listdir(goal_dir))
    except FileNotFoundError:
        return ()
    out = list(_NO_FILES)
    for name in present:  # one removed since the listing is ABSENT
        at = _SLOT[name]
        out[at : at + 3] = fingerprint(f"{goal_dir}/{name}")
    return tuple(out)


def absent_files(fp: Fingerprint) -> frozenset[str]:
    """The status files a goal fingerprint records as missing (size -1)."""
    if not fp:
        return frozenset()
    return _absent_of(tuple(map(ABSENT_SIZE.__eq__, fp[2::3])))


@functools.lru_cache(maxsize=128)
def _absent_of(missing: tuple[bool, ...]) -> frozenset[str]:
    # Few goals differ in which files they have: one set per pattern.
    return frozenset(name for name, gone in zip(FINGERPRINT_NAMES, missing, strict=True) if gone)
