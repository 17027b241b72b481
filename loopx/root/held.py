"""The runtime root held by directory descriptor, and what happens when its path changes.

Before it, a rename or symlink swap above the root killed the fleet
silently and for good. The rule now: a supervisor opens its root as a
directory descriptor at start (:class:`RootHandle`) and checks every few
seconds that the path still names that directory (same device and inode,
no symlink on the way). When it does not, the supervisor stops its fleet
(agents finish or stop their turn; whatever is unfinished is in the journals
of the directory it opened), says why in its log (``root_moved``), writes the
reason into the directory it opened (``root-moved.json``, through the
descriptor, so it lands in the root wherever it went) and exits with
``FAILURE``, so a unit with ``Restart=on-failure`` starts it again: that start
finds the root at its path again (moved back) or refuses a missing root
with a clear error and is retried by systemd, and the first start that
opens the root reads and reports the note (:func:`take_note`).
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path
from typing import Final

from loopx.errors import resource_fault
from loopx.model import Record, UtcDatetime, utcnow
from loopx.storage.files import FILE_MODE, read_bytes

NOTE_NAME: Final = "root-moved.json"


class RootMovedNote(Record):
    """Why a supervisor stopped its fleet: its root's path no longer named the directory it opened."""

    schema_version: int = 1
    path: str  # the root's path as the supervisor opened it
    problem: str  # what the path named instead ("missing", "another directory", ...)
    stopped_at: UtcDatetime
    pid: int


class RootHandle:
    """A root opened by directory descriptor, and the identity its path must keep."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        st = os.fstat(self.fd)
        self.identity = (st.st_dev, st.st_ino)
        self.real = os.path.realpath(path)

    def problem(self) -> str | None:
        """What the path names now if it is not the directory opened, else None. One stat."""
        try:
            st = os.stat(self.path, follow_symlinks=False)
        except FileNotFoundError:
            return "nothing: the root was moved or removed"
        except OSError as e:
            if resource_fault(e) is not None:
                raise  # no memory or descriptor for a stat says nothing about the root
            return f"nothing readable ({e.strerror})"
        if (st.st_dev, st.st_ino) != self.identity:
            return (
                "another file or directory: the root (or a directory above it) was moved or swapped"
            )
        # The last component is the same; a swapped directory above it changes the full
        # path's resolution, which os.path.realpath sees.
        if os.path.realpath(self.path) != self.real:
            return "the same directory by another way: a directory above it was swapped"
        return None

    def write_note(self, problem: str) -> RootMovedNote:
        """Record why the fleet stops, inside the directory opened (wherever it is now)."""
        note = RootMovedNote(
            path=str(self.path), problem=problem, stopped_at=utcnow(), pid=os.getpid()
        )
        self.write_file(NOTE_NAME, note.model_dump_json(indent=2).encode() + b"\n")
        return note

    def write_file(self, name: str, data: bytes) -> None:
        """Replace the file ``name`` at the top of the directory opened, atomically and durably.

        Through the descriptor, so it lands in the root wherever it went: the
        path-based writers refuse a root whose path was renamed or swapped.
        """
        tmp = f".{name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
        fd = os.open(
            tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, FILE_MODE, dir_fd=self.fd
        )
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        os.fsync(self.fd)

    def close(self) -> None:
        """Close the descriptor."""
        with contextlib.suppress(OSError):
            os.close(self.fd)


def take_note(root: Path) -> RootMovedNote | None:
    """The note a stopped supervisor left in ``root``, removed once read; None when there is none."""
    path = root / NOTE_NAME
    try:
        data = read_bytes(path, limit=64 * 1024)
    except FileNotFoundError:
        return None
    with contextlib.suppress(OSError):
        path.unlink()
    try:
        return RootMovedNote.model_validate_json(data)
    except ValueError:
        return None


__all__ = ["NOTE_NAME", "RootHandle", "RootMovedNote", "take_note"]
