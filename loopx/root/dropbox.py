"""Where a host writes its result: a private directory outside the root, on a memory filesystem.

The drop box used to live in the root, so a host that finished its
work while the root was read-only or out of inodes could not write its result
and the turn failed ``host_exit``. Now the result file is in a directory of
this user on a tmpfs (``$XDG_RUNTIME_DIR/loopx/``, else ``/dev/shm/loopx-<uid>/``),
one subdirectory per root and goal, every level 0700 and owned by us. A host
that finished during a root fault keeps its outcome: the agent reads it into
memory and waits, renewing its lease, until the root takes the journal write
(:func:`loopx.turn.steps.committing.commit`).

Where no such directory can be trusted (none exists, or the base is not a
directory owned by us with mode 0700: another user may have planted it in the
world-writable ``/dev/shm``), the drop box is the root's ``goals/<id>/results/``
as before, and the root fault costs the turn as before.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

from loopx.root import Layout


def _trusted_base(base: Path) -> bool:
    """Whether ``base`` is (or was just made) a real directory of ours with mode 0700."""
    try:
        os.mkdir(base, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return False
    try:
        st = base.lstat()
    except OSError:
        return False
    return (
        stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and stat.S_IMODE(st.st_mode) == 0o700  # noqa: PLR2004 - the mode we create
    )


def drop_box_base() -> Path | None:
    """The private memory-backed directory results go to, or None where there is none."""
    candidates = []
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isdir(runtime):
        candidates.append(Path(runtime) / "loopx")
    if os.path.isdir("/dev/shm"):  # noqa: S108 - checked below: ours, 0700, not a symlink
        candidates.append(Path(f"/dev/shm/loopx-{os.getuid()}"))  # noqa: S108
    for base in candidates:
        if _trusted_base(base):
            return base
    return None


def result_path(layout: Layout, goal_id: str, turn_key: str) -> Path:
    """Where the host of ``turn_key`` writes its result (``LOOPX_RESULT_FILE``)."""
    base = drop_box_base()
    if base is None:
        return layout.goal_dir(goal_id) / "results" / f"{turn_key}.json"
    root = hashlib.sha256(str(layout.root).encode()).hexdigest()[:16]
    return base / root / goal_id / f"{turn_key}.json"


__all__ = ["drop_box_base", "result_path"]
