"""Log files under the root rotate by size: ``x.log``, then ``x.log.1`` (newest) to ``x.log.N``.

A process whose stdout and stderr are a log file (an agent, a supervisor
started by ``supervisor start`` or ``batch run``) rotates it itself: before a
write, when the file has passed its size, the older files shift up by one, the
oldest beyond ``keep`` goes, and a fresh file takes the place of descriptors 1
and 2 (``dup2``), so every later write of this process, its console included,
lands in the new file (logs were appended to for ever).
Readers (:mod:`loopx.history.logreader`) read the rotated files oldest first.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

from loopx import environ

MAX_BYTES = 10 * 1024 * 1024  # one file's size before it rotates
KEEP = 5  # rotated files kept beside the live one: at most (KEEP + 1) * MAX_BYTES per log


def rotated(path: Path, keep: int = KEEP) -> list[Path]:
    """The files of the log ``path`` that exist, oldest first (``x.log.N`` .. ``x.log``)."""
    names = [path.with_name(f"{path.name}.{i}") for i in range(keep, 0, -1)]
    return [p for p in [*names, path] if p.is_file()]


def shift(path: Path, keep: int = KEEP) -> None:
    """Move ``x.log`` to ``x.log.1``, each ``x.log.i`` to ``.i+1``; drop what passes ``keep``."""
    with contextlib.suppress(FileNotFoundError):
        path.with_name(f"{path.name}.{keep}").unlink()
    for i in range(keep - 1, 0, -1):
        with contextlib.suppress(FileNotFoundError):
            path.with_name(f"{path.name}.{i}").rename(path.with_name(f"{path.name}.{i + 1}"))
    with contextlib.suppress(FileNotFoundError):
        path.rename(path.with_name(f"{path.name}.1"))


def open_log(path: Path) -> int:
    """A descriptor appending to ``path`` (created 0600; a symlink there is refused)."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)


@dataclass(slots=True)
class StdioRotation:
    """Rotate the log file that this process's descriptors 1 and 2 write to."""

    path: Path
    max_bytes: int = MAX_BYTES
    keep: int = KEEP

    @classmethod
    def from_env(cls, env: dict[str, str] | os._Environ[str]) -> StdioRotation | None:
        """The rotation ``LOOPX_LOG_FILE`` names, when descriptor 2 is that very file."""
        name = env.get(environ.LOG_FILE)
        if not name:
            return None
        try:
            ours, there = os.fstat(2), os.stat(name)
        except OSError:
            return None
        if (ours.st_dev, ours.st_ino) != (there.st_dev, there.st_ino):
            return None  # stderr is a terminal or a pipe: nothing of ours to rotate
        return cls(Path(name), max_bytes=_int(env.get(environ.LOG_MAX_BYTES), MAX_BYTES))

    def check(self) -> None:
        """Rotate now if descriptor 2's file has passed ``max_bytes``; never raises."""
        try:
            if os.fstat(2).st_size < self.max_bytes:
                return
            shift(self.path, self.keep)
            fd = open_log(self.path)
        except OSError:
            return  # a full or read-only disk: keep writing where we are
        shared = _same_file(1, 2)  # stdout goes along only if it wrote to the same file
        try:
            with contextlib.suppress(OSError):
                os.dup2(fd, 2)
                if shared:
                    os.dup2(fd, 1)
        finally:
            os.close(fd)


def _same_file(a: int, b: int) -> bool:
    try:
        sa, sb = os.fstat(a), os.fstat(b)
    except OSError:
        return False
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


def _int(text: str | None, default: int) -> int:
    try:
        return max(int(text), 1) if text else default
    except ValueError:
        return default


class RotatingFile:
    """Append lines to a log file, rotating it by size (a writer that owns the file)."""

    def __init__(self, path: Path, *, max_bytes: int = MAX_BYTES, keep: int = KEEP) -> None:
        self.path, self.max_bytes, self.keep = path, max_bytes, keep
        self._fd = open_log(path)

    def write(self, data: bytes) -> None:
        """Append ``data`` (whole lines) in one write; rotate first when the file is full."""
        try:
            if os.fstat(self._fd).st_size >= self.max_bytes:
                os.close(self._fd)
                shift(self.path, self.keep)
                self._fd = open_log(self.path)
            os.write(self._fd, data)
        except OSError:
            return  # a full disk loses the line, never the writer

    def close(self) -> None:
        """Close the file."""
        with contextlib.suppress(OSError):
            os.close(self._fd)


__all__ = ["KEEP", "MAX_BYTES", "RotatingFile", "StdioRotation", "open_log", "rotated", "shift"]
