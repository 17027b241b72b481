"""Every goal's fingerprint, taken by a forked child while the CLI starts up.

A ``loopx status --json`` that refreshes checks every goal's files (its
default ``--full-scan-after 0``): a listing and an ``lstat`` per file, about
0.15 s of system calls at 10,000 goals. Before it can use them, the process
spends longer still importing pydantic and the models. Neither needs the
other, so a child forked before those imports (:mod:`loopx.forked`) takes the
fingerprints on the other core and hands them over when the refresh asks.

A fingerprint taken early is like a remembered one
(:class:`loopx.status.watch.FingerprintMemo`): the refresh takes afresh those
of cached goals that a hint or a lease names (their change must not be
skipped), and it reads a goal's files after its fingerprint was taken, so a
change in between shows as a changed fingerprint next time.
"""

from __future__ import annotations

import contextlib
import marshal
import os

from loopx.forked import Forked
from loopx.status.fingerprint import Fingerprint, goal_fingerprint

Fingerprints = dict[str, Fingerprint]


def prefetch_fingerprints(goals_dir: str) -> Forked[Fingerprints]:
    """Start the child; its result is each goal directory's fingerprint, by goal id."""
    return Forked.start(lambda: _scan(goals_dir), dumps=marshal.dumps, loads=_loads)


def _scan(goals_dir: str) -> Fingerprints:
    out: Fingerprints = {}
    for name in os.listdir(goals_dir):
        # Not a directory, unreadable: the parent meets it (and says so) itself.
        with contextlib.suppress(OSError):
            out[name] = goal_fingerprint(f"{goals_dir}/{name}")
    return out


def _loads(data: bytes) -> Fingerprints:
    out = marshal.loads(data)  # noqa: S302 - our own child, over our own pipe
    if not isinstance(out, dict):
        msg = "fingerprint prefetch: not a mapping"
        raise TypeError(msg)
    return out
