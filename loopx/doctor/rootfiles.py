"""Root-wide file checks, in one walk: permissions, owners, symlinks, stray temp files."""

from __future__ import annotations

import os
import stat
from datetime import timedelta
from pathlib import Path
from typing import Final

import psutil

from loopx.doctor.findings import Checker, FindingCode, Severity, q
from loopx.registry.worktree_record import FOLDER_NAME, MERGE_FOLDER
from loopx.sandbox import SANDBOX_FOLDER

# A temp file of a live writer younger than this is an atomic write in flight.
TEMP_IN_FLIGHT: Final = timedelta(hours=1)
_OWNER_WX: Final = stat.S_IWUSR | stat.S_IXUSR  # what a directory's owner needs to write in it


def mode_problem(mode: int, *, is_dir: bool) -> tuple[Severity, str] | None:
    """Whether a file mode is broader than LoopX's (0700 dirs, 0600 files). Pure."""
    wanted = 0o700 if is_dir else 0o600
    perms = stat.S_IMODE(mode)
    if perms & (stat.S_IWGRP | stat.S_IWOTH):
        return Severity.ERROR, f"mode {perms:o} lets other users write (want {wanted:o})"
    if perms & 0o077:
        return Severity.WARNING, f"mode {perms:o} lets other users read (want {wanted:o})"
    return None


def temp_writer_pid(name: str) -> int | None:
    """The writer pid in an atomic write's temp name ``.<name>.<pid>.<hex>.tmp``. Pure."""
    parts = name.split(".")
    if len(parts) >= 5 and parts[0] == "" and parts[-1] == "tmp" and parts[-3].isdigit():  # noqa: PLR2004
        return int(parts[-3])
    return None


def walk_root(doc: Checker) -> None:
    """Check every entry of the root, once, except what is inside a git worktree.

    The folders under ``worktrees/`` (a goal's worktree, a merge's scratch
    worktree under ``worktrees/.merge/``) and everything in them are the
    repository's: git chose their modes and tracks the executable bit, so
    the root's 0700/0600 rule does not apply there and a ``chmod`` would be a
    change to commit (:mod:`loopx.doctor.worktreecheck` checks them as git sees them).
    """
    root = doc.layout.root
    check_entry(doc, root, root.lstat())
    git_tops = worktree_tops(root)
    for top, dirs, names in os.walk(root, followlinks=False):
        for name in [*dirs, *names]:
            path = Path(top) / name
            try:
                st = path.lstat()
            except FileNotFoundError:
                continue  # removed while we walked
            if top in git_tops and stat.S_ISDIR(st.st_mode) and name != MERGE_FOLDER:
                dirs.remove(name)  # a worktree folder: git's, not walked
                continue
            if name == SANDBOX_FOLDER and Path(top).parent == doc.layout.goals_dir:
                dirs.remove(name)  # a sandboxed host's own home: its files, its modes
                continue
            check_entry(doc, path, st)


def worktree_tops(root: Path) -> set[str]:
    """The directories (as ``os.walk`` names them) whose subfolders are git worktrees. Pure."""
    folder = os.path.join(root, FOLDER_NAME)
    return {folder, os.path.join(folder, MERGE_FOLDER)}


def check_entry(doc: Checker, path: Path, st: os.stat_result) -> None:
    """One entry: a symlink, a foreign owner, a broad mode, a dead writer's temp file."""
    if stat.S_ISLNK(st.st_mode):
        doc.add(
            Severity.ERROR,
            FindingCode.SYMLINK,
            path,
            f"a symlink (to {os.readlink(path)!r}) inside the root; LoopX refuses to use it",
            f"rm {q(path)}",
        )
        return
    is_dir = stat.S_ISDIR(st.st_mode)
    if not is_dir and not stat.S_ISREG(st.st_mode):
        return  # sockets (tmux.sock) and the like are not LoopX's durable files
    if not is_dir:
        doc.files += 1
    elif st.st_mode & _OWNER_WX != _OWNER_WX or not os.access(path, os.W_OK | os.X_OK):
        # A root whose goals/ or projections/ is 0500 passed as healthy while every
        # write under it failed. By the mode bits too: root's own access
        # check passes any mode, the service user's does not.
        doc.add(
            Severity.ERROR,
            FindingCode.PERMISSIONS,
            path,
            f"mode {stat.S_IMODE(st.st_mode):o}: its owner cannot write here, so commands "
            "that write under it fail (want 700)",
            f"chmod 700 {q(path)}",
        )
    if (
        not is_dir
        and path.parent.name == "results"
        and path.parent.parent.parent == (doc.layout.goals_dir)
    ):
        # The host's drop box: it writes there with its own umask. A file left
        # behind is a result (or its temp file) of a turn that is over.
        doc.add(
            Severity.INFO,
            FindingCode.STRAY_TEMP,
            path,
            "left by a host in its result drop box; LoopX read what it needed",
            f"rm {q(path)}",
        )
        return
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        doc.add(
            Severity.ERROR,
            FindingCode.OWNER,
            path,
            f"owned by uid {st.st_uid}, not by you (uid {os.getuid()})",
            f"chown {os.getuid()} {q(path)}",
        )
    bad = mode_problem(st.st_mode, is_dir=is_dir)
    if bad is not None:
        doc.add(
            bad[0],
            FindingCode.PERMISSIONS,
            path,
            bad[1],
            f"chmod {'700' if is_dir else '600'} {q(path)}",
        )
    pid = temp_writer_pid(path.name) if not is_dir else None
    if pid is not None:
        age = doc.now.timestamp() - st.st_mtime
        if psutil.pid_exists(pid) and age < TEMP_IN_FLIGHT.total_seconds():
            return  # an atomic write in flight
        doc.add(
            Severity.INFO,
            FindingCode.STRAY_TEMP,
            path,
            f"temp file of an atomic write whose writer (pid {pid}) died before the "
            "rename; the file it was for is intact",
            f"rm {q(path)}",
        )
