"""The bubblewrap command line of one sandboxed run: what is visible, and how. Pure.

The sandbox is built up from nothing rather than carved out of ``/``: the
system's directories read-only, a private ``/proc``, ``/dev`` and ``/tmp``,
then the few paths the run may use (:class:`Mounts`). So nothing of the
user's home, of another goal's workdir or of the runtime root is there to
hide, whatever path they have. Every namespace is unshared (the network
leaves only the loopback, where the bridge listens), capabilities are
dropped, and ``--die-with-parent`` ends the sandbox with its agent.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Final

# The system, read-only; a merged-/usr link is made as the same link.
SYSTEM_DIRS: Final = (
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc",
    "/opt",
)
INSIDE_DIR: Final = "/run/loopx"  # where the bridge and the proxy's socket are, inside
BRIDGE_PORT: Final = 3128  # the bridge's port on the sandbox's own loopback


@dataclass(frozen=True, slots=True)
class Mounts:
    """The paths one run sees besides the system: all absolute, outside paths."""

    workdir: str  # read-write; the run's cwd
    home: str  # the sandbox's home (scratch), mounted at ``home_at``
    home_at: str  # the path HOME has inside (the user's, so ~ resolves alike)
    tmp: str  # scratch, mounted at /tmp
    net: str  # the folder holding the proxy's socket, at INSIDE_DIR/net
    bridge: str  # the bridge script, read-only at INSIDE_DIR/bridge.py
    results: tuple[str, str] | None = None  # (scratch folder, the result file's folder)
    writable: tuple[str, ...] = ()  # more read-write paths (git dir, the account's CLI config)
    readable: tuple[str, ...] = ()  # more read-only paths (the interpreter's prefix)
    hidden: tuple[str, ...] = ()  # paths under a mounted one that must stay hidden (the root)
    files: tuple[str, ...] = ()  # files of the root the command names (codex's result schema)


def bwrap_argv(mounts: Mounts, *, exists: bool = True) -> list[str]:
    """``bwrap`` and its options, up to and including ``--``. Pure but for ``islink``.

    ``exists`` False skips the checks of which system directories exist (tests).
    """
    argv = [
        "bwrap",
        "--unshare-all",
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
    ]
    for path in SYSTEM_DIRS:
        if os.path.islink(path):
            argv += ["--symlink", os.readlink(path), path]
        elif not exists or os.path.isdir(path):
            argv += ["--ro-bind", path, path]
    argv += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/run", "--dir", INSIDE_DIR]
    argv += ["--bind", mounts.tmp, "/tmp"]  # noqa: S108 - the sandbox's own /tmp, from scratch
    argv += ["--bind", mounts.home, mounts.home_at]
    for path in mounts.readable:
        argv += ["--ro-bind", path, path]
    argv += ["--bind", mounts.workdir, mounts.workdir]
    for path in mounts.writable:
        argv += ["--bind", path, path]
    for path in mounts.hidden:
        if _under(path, [mounts.workdir, mounts.home_at, *mounts.writable, *mounts.readable]):
            argv += ["--tmpfs", path]
    for path in mounts.files:
        argv += ["--ro-bind", path, path]
    if mounts.results is not None:
        argv += ["--bind", *mounts.results]
    argv += ["--ro-bind", mounts.bridge, f"{INSIDE_DIR}/bridge.py"]
    argv += ["--bind", mounts.net, f"{INSIDE_DIR}/net"]
    argv += ["--chdir", mounts.workdir, "--"]
    return argv


def _under(path: str, parents: list[str]) -> bool:
    p = Path(path)
    return any(p == Path(parent) or Path(parent) in p.parents for parent in parents)


__all__ = ["BRIDGE_PORT", "INSIDE_DIR", "Mounts", "bwrap_argv"]
