"""Directories: made 0700 with their missing parents, fsynced (alone or in a batch), never through a symlink.

The directory half of the file primitives (:mod:`loopx.storage.files` holds the files): a
directory made once is remembered for a second, so a burst of writes does not stat it again;
a root a process opened is never created again under it (a moved root is an error, not a
fresh tree).
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import stat
import time
from pathlib import Path

from loopx.errors import (
    RootMovedError,
    UnsafePathError,
)

TYPE_CHECKING = False  # nor `typing` at run time: see loopx.storage.files
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Final


DIR_MODE: Final = 0o700


def ensure_dir(path: Path) -> Path:
    """Create ``path`` (and parents) with mode 0700 if missing; refuse a symlink.

    Returns:
        ``path``.

    Raises:
        UnsafePathError: ``path`` is a symlink or not a directory.
        RootMovedError: a runtime root this process opened (or a directory
            above it) is missing: it was moved or removed, and is not recreated.
    """
    # The directory itself is looked at every time (it may have to be made, or its root
    # may have moved); the two above it once (_CHECKED_DIRS).
    refuse_symlinked_parents(path)
    try:
        st = path.lstat()
    except FileNotFoundError:
        _make_missing(path)
        st = path.lstat()
    if stat.S_ISLNK(st.st_mode):
        raise UnsafePathError(path, "it is a symlink")
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafePathError(path, "it is not a directory")
    _CHECKED_DIRS.add(os.fspath(path))
    return path


class _CheckedDirs:
    """Directories found to be real directories with no symlink in the two levels checked.

    Each is checked once, not at every file operation under it (a turn made
    ~180 lstat calls for ~20 files). What could plant a symlink afterwards is
    code LoopX does not control: a host or a done-check, this agent's or
    another's. So the set is forgotten when a root is opened, at each claim
    and after each host or check run (:func:`forget_checked_dirs`), and by
    itself a second after it was last forgotten, which bounds how long a
    long-lived process (the server, the supervisor) trusts an old check;
    between those points a planted symlink meets the same race as the lstat
    before an open always did.
    """

    __slots__ = ("dirs", "since")

    def __init__(self) -> None:
        self.dirs: set[str] = set()
        self.since = time.monotonic()

    def __contains__(self, directory: str) -> bool:
        if time.monotonic() - self.since > CHECKED_DIRS_FOR_S:
            self.forget()
            return False
        return directory in self.dirs

    def add(self, directory: str) -> None:
        self.dirs.add(directory)

    def forget(self) -> None:
        self.dirs.clear()
        self.since = time.monotonic()


CHECKED_DIRS_FOR_S: Final = 1.0


_CHECKED_DIRS = _CheckedDirs()


def forget_checked_dirs() -> None:
    """Check every directory again at its next use (code LoopX does not control may have run)."""
    _CHECKED_DIRS.forget()


def checked_dirs(*paths: Path) -> bool:
    """Whether :func:`ensure_dir` found every one of ``paths`` since the set was last forgotten."""
    return all(os.fspath(path) in _CHECKED_DIRS for path in paths)


# Runtime roots this process opened (loopx.root.open_root). A missing one was moved or
# removed under a running fleet; mkdir(parents=True) once recreated a skeleton root of
# 0755 directories at the old path, which blocked moving the original back.
_OPENED_ROOTS: set[str] = set()


def note_root(path: Path) -> None:
    """Remember ``path`` as a runtime root: :func:`ensure_dir` never creates it or above it."""
    _OPENED_ROOTS.add(os.path.abspath(path))
    forget_checked_dirs()


def opened_root_of(path: Path | str) -> str | None:
    """The runtime root this process opened that holds ``path`` (absolute), or None."""
    text = os.fspath(path)
    for root in _OPENED_ROOTS:
        if text == root or text.startswith(root.rstrip("/") + "/"):
            return root
    return None


def _make_missing(path: Path) -> None:
    """Create the missing directories of ``path``, each 0700 whatever the umask; none of a root."""
    missing: list[str] = []
    current = os.path.abspath(path)
    while not os.path.lexists(current):
        missing.append(current)
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    for directory in missing:
        prefix = directory.rstrip("/") + "/"
        gone = [r for r in _OPENED_ROOTS if r == directory or r.startswith(prefix)]
        if gone:
            raise RootMovedError(Path(gone[0]), Path(path))
    for directory in reversed(missing):
        try:
            os.mkdir(directory, DIR_MODE)
        except FileExistsError:
            continue
        os.chmod(directory, DIR_MODE)  # mkdir's mode passes through the umask


# The directories whose fsync an open :func:`dir_sync_batch` owes, in first-use order.
_PENDING_DIRS: contextvars.ContextVar[dict[Path, None] | None] = contextvars.ContextVar(
    "loopx_pending_dir_fsyncs", default=None
)


def fsync_dir(path: Path) -> None:
    """Make a directory's entries (a rename, a new file) durable.

    Inside :func:`dir_sync_batch` the fsync is owed instead, and paid once per
    directory when the batch ends.
    """
    pending = _PENDING_DIRS.get()
    if pending is not None:
        pending[path] = None
        return
    _fsync_dir_now(path)


def _fsync_dir_now(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def dir_sync_batch() -> Iterator[None]:
    """Defer the directory fsyncs of the writes inside; fsync each directory once at the end.

    File contents are still fsynced before each rename (a rename never
    publishes unsynced bytes); only making the *names* durable waits. So when
    the block returns every write in it is as durable as without the batch,
    but a directory that took five renames was fsynced once, not five times.

    Use it only around writes whose relative durability does not matter until
    the block ends: a power cut inside it may keep any subset of the renames.
    The phases between ``host_execute`` and ``scheduler_ack`` (recovery
    redoes them all, idempotently, until the terminal journal is written) are
    such a group.
    Batches nest: an inner one leaves its directories to the outer one. If
    the block raises, the owed fsyncs are still paid before the error goes on.
    """
    if _PENDING_DIRS.get() is not None:
        yield
        return
    pending: dict[Path, None] = {}
    token = _PENDING_DIRS.set(pending)
    try:
        yield
    finally:
        _PENDING_DIRS.reset(token)
        for path in pending:
            _fsync_dir_now(path)


def refuse_symlink(path: Path) -> None:
    """Refuse ``path`` if it or one of the two directories above it is a symlink.

    Raises:
        UnsafePathError: it is.
    """
    if os.path.islink(path):  # os.path, not pathlib: this runs on every write of a turn
        raise UnsafePathError(path, "it is a symlink")
    refuse_symlinked_parents(path)


def refuse_symlinked_parents(path: Path) -> None:
    """Refuse a path whose directory or the directory above it is a symlink.

    ``O_NOFOLLOW`` guards only the last component. Every durable file sits at
    most two directories below a goal (``goals/<id>/turns/<key>.json``) and the
    root itself is resolved when it is opened, so checking two levels means no
    planted directory symlink (``goals/<id>``, ``turns/``, ``runs/``) is ever
    followed.

    Raises:
        UnsafePathError: one of the two directories is a symlink.
    """
    # os.path on strings, not pathlib: this runs on every read and write of a turn.
    parent = os.path.dirname(path)
    if parent in _CHECKED_DIRS:
        return
    for directory in (parent, os.path.dirname(parent)):
        if os.path.islink(directory):
            raise UnsafePathError(Path(directory), "it is a symlink")
    if os.path.isdir(parent):  # not a symlink (above): a real directory, checked once
        _CHECKED_DIRS.add(parent)
