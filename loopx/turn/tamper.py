"""Catching a host that writes into the runtime root.

A host runs as the same user as LoopX, so it *can* write into the root (it
is told where it is: ``LOOPX_ROOT``). LoopX cannot stop that; it makes sure
such a write never goes unnoticed. Before the host starts, the turn takes a
:class:`GoalFingerprint` of what nobody but LoopX's own fenced writes may
change while the host runs:

* ``history.jsonl``, ``quota.jsonl`` and the newest :data:`RECENT` finished
  journals and run logs, by ``(inode, size, ctime_ns)`` (a write, rename or
  chmod always moves ctime, and user space cannot set it back),
* the ``turns/`` and ``runs/`` directories by mtime (a file created, deleted
  or renamed there, however old), and
* the turn-owned fields of ``state.json`` (a human may open or answer a gate
  while a turn runs, so ``gates``, ``host_session`` and ``updated_at`` are
  left out).

After the host exits the fingerprint is taken again; any difference fails
the turn with ``root_tampered`` naming the files, and nothing is "repaired"
silently: ``loopx doctor`` and ``loopx replay GOAL --verify`` show the damage
and ``loopx replay GOAL --repair`` rebuilds the projections from the journals.
"""

from __future__ import annotations

import heapq
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from loopx.errors import LoopxError
from loopx.root import Layout
from loopx.storage.files import read_bytes
from loopx.turn.journal import parse_turn_key

_STATE_SKIP: Final = frozenset({"gates", "host_session", "updated_at"})
# Older tombstones are not stat'ed on every turn: the check must cost the same
# at turn 10 and turn 100,000. An in-place rewrite of an older journal is left
# to `loopx replay GOAL --verify` (docs/reliability.md).
RECENT: Final = 8


_MISSING: Final = ("missing",)


def _stat_key(path: Path) -> tuple[object, ...]:
    try:
        st = path.lstat()
    except FileNotFoundError:
        return _MISSING
    if stat.S_ISDIR(st.st_mode):
        return (st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_mode)
    return (st.st_ino, st.st_size, st.st_ctime_ns, st.st_mode)


def _state_key(path: Path) -> str:
    try:
        # read_bytes: a host may leave a FIFO or a device here; the read must not block.
        document = json.loads(read_bytes(path))
    except FileNotFoundError:
        return "missing"
    except (OSError, ValueError, LoopxError) as e:
        return f"unreadable: {e}"
    if not isinstance(document, dict):
        return "not an object"
    return json.dumps({k: v for k, v in document.items() if k not in _STATE_SKIP}, sort_keys=True)


@dataclass(frozen=True, slots=True)
class GoalFingerprint:
    """What a host must not change while it runs, for one goal."""

    files: dict[str, tuple[object, ...]]
    state: str

    @classmethod
    def take(cls, layout: Layout, goal_id: str, *, running: str) -> GoalFingerprint:
        """Fingerprint the goal's files now, except the journal of the turn ``running``."""
        goal_dir = layout.goal_dir(goal_id)
        # A directory's mtime moves whenever an entry is created, deleted or renamed
        # in it: two stats cover every old tombstone's name without listing them.
        names = ["history.jsonl", "quota.jsonl", "turns/", "runs/"]
        parsed = parse_turn_key(running)
        seq = parsed[1] if parsed else 0
        for n in range(max(1, seq - RECENT), seq):
            names += [f"runs/{n}.json", f"runs/{n}.md"]
        mine = f"{running}.json"
        try:
            journals = [n for n in os.listdir(goal_dir / "turns") if n[0] != "." and n != mine]
        except (FileNotFoundError, NotADirectoryError):
            journals = []
        # Journal names carry a zero-padded seq, so the newest sort last by name.
        names += [f"turns/{n}" for n in heapq.nlargest(RECENT, journals)]
        files = {name: _stat_key(goal_dir / name) for name in names}
        return cls(files=files, state=_state_key(layout.state_file(goal_id)))

    def changed(self, layout: Layout, goal_id: str, *, running: str) -> list[str]:
        """The files (relative to the goal directory) that differ from this fingerprint."""
        now = GoalFingerprint.take(layout, goal_id, running=running)
        out = [
            name
            for name in sorted(set(self.files) | set(now.files))
            if self.files.get(name, _MISSING) != now.files.get(name, _MISSING)
        ]
        if now.state != self.state:
            out.insert(0, "state.json")
        return out


__all__ = ["GoalFingerprint"]
