"""Whether any process holds a pid, asked of the kernel alone.

For the warm paths that must not import psutil (or even ``dataclasses``) to
learn that a recorded process is gone: :mod:`loopx.process` and the status
snapshot ask here first, and only a pid still held goes on to psutil.
"""

from __future__ import annotations

import os


def pid_held(pid: int) -> bool:
    """False when no process holds ``pid``; True otherwise, or when the kernel cannot say.

    0 and negative pids name process groups to ``kill()``: they are left to psutil (True).
    """
    if pid <= 0:
        return True
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the pid exists
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process holds the pid
    return True
