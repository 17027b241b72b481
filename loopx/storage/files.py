"""File primitives used everywhere: atomic write, exclusive create, reads.

Every durable byte LoopX writes goes through this module or the two built on
it (:mod:`loopx.storage.locks`, :mod:`loopx.storage.jsonl`), so the crash
guarantees are argued once:

* atomic write: temp file in the same directory, write, fsync, rename, fsync
  the directory. A reader sees the old or the new file, never a mix.
* exclusive create: ``O_CREAT|O_EXCL|O_NOFOLLOW``; exactly one creator wins.
* no symlink is followed: the file itself (``O_NOFOLLOW``) and the two
  directories above it are checked (:func:`~loopx.storage.dirs.refuse_symlink`), or the file is
  opened relative to a directory opened by :func:`open_dir`.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from loopx.errors import (
    CorruptFileError,
    FileTooLargeError,
    NotRegularFileError,
    UnsafePathError,
)
from loopx.storage.dirs import fsync_dir, refuse_symlink, refuse_symlinked_parents

FILE_MODE: Final = 0o600
_READ_CHUNK: Final = 1024 * 1024  # what read_bytes reads at a time past the size it saw
# The most read_bytes reads of one file when its caller names no smaller cap. Far above any
# file LoopX writes (a 100,000-goal single-file registry is ~50 MiB), far below what a sparse
# or planted file can claim: st_size is never trusted for an allocation (a sparse
# 100 GiB result crashed the agent with MemoryError).
MAX_READ_BYTES: Final = 256 * 1024 * 1024
# Opening never blocks (a FIFO's open waits for a writer for ever) and never
# follows a symlink at the last component; what is opened must then be a regular file.
_READ_FLAGS: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK
_KINDS: Final = {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
    stat.S_IFDIR: "a directory",
}

# pydantic only for the type checker: `loopx status --json` on a warm cache resolves the
# root with this module and prints a stored document without importing pydantic.
# Nor `typing` (a warm `quota should-run` opens the root with this module).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final, TypeVar

    from pydantic import BaseModel, ValidationError

    M = TypeVar("M", bound="BaseModel")


# --- directories -------------------------------------------------------------------------------


# --- whole files -------------------------------------------------------------------------------


def _fill(fd: int, data: bytes, path: Path, *, durable: bool, remove: Path) -> None:
    """Write ``data`` through ``fd`` (fsync'd when durable) and close it; on failure remove ``remove``."""
    try:
        _write_all(fd, data, path)
        if durable:
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        remove.unlink(missing_ok=True)
        raise
    os.close(fd)


def _write_all(fd: int, data: bytes, path: Path) -> None:
    """Write every byte of ``data`` to ``path``'s ``fd`` (``os.write`` may write fewer)."""
    # Imported here, not above: opening a root (a warm `quota should-run`) writes nothing.
    from loopx.faults import io_fault_point  # noqa: PLC0415

    io_fault_point(path)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def atomic_write_bytes(
    path: Path, data: bytes, *, durable: bool = True, sync_dir: bool = True
) -> None:
    """Replace ``path`` with ``data`` so that readers see the old or the new content.

    ``durable=False`` skips both fsyncs: only for caches that are rebuilt from
    durable files (``projections/``), where a write lost to a power cut costs
    a rebuild, not data. ``sync_dir=False`` fsyncs the content but leaves the
    rename to be made durable by a later fsync of the same directory: only
    for a write whose loss to a power cut is repaired from other durable
    files (a turn's terminal journal: recovery finishes the turn again).
    """
    refuse_symlink(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, FILE_MODE)
    _fill(fd, data, path, durable=durable, remove=tmp)
    os.replace(tmp, path)
    if durable and sync_dir:
        fsync_dir(path.parent)


def atomic_write_model(
    path: Path,
    model: BaseModel,
    *,
    durable: bool = True,
    indent: int | None = 2,
    sync_dir: bool = True,
) -> None:
    """Atomically write a model as JSON (indented unless ``indent`` is None)."""
    atomic_write_bytes(
        path,
        model.model_dump_json(indent=indent).encode() + b"\n",
        durable=durable,
        sync_dir=sync_dir,
    )


def exclusive_create(path: Path, data: bytes, *, durable: bool = True) -> bool:
    """Create ``path`` with ``data`` unless it exists. Exactly one concurrent creator wins.

    ``durable=False`` skips the fsyncs, for a file a power loss may lose or
    leave empty without harm (a lease: its holder died with the machine).

    Returns:
        True if this call created the file, False if it already existed.
    """
    refuse_symlinked_parents(path)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, FILE_MODE)
    except FileExistsError:
        return False
    # A failed write (ENOSPC, EIO) must not leave a partial file that every later
    # creator would take for a winner's (an empty lease blocked its goal for ever).
    _fill(fd, data, path, durable=durable, remove=path)
    if durable:
        fsync_dir(path.parent)
    return True


def read_bytes(path: Path, *, limit: int | None = None) -> bytes:
    """Read a regular file without following a symlink at its last component, nor blocking.

    Args:
        path: the file.
        limit: return at most this many bytes (the rest is not read); None: the
            whole file, which must hold at most :data:`MAX_READ_BYTES`.

    Raises:
        FileNotFoundError: the file does not exist.
        UnsafePathError: the path is a symlink.
        NotRegularFileError: it is a FIFO, a device, a socket or a directory.
        FileTooLargeError: no ``limit`` and the file holds more than the cap.
    """
    refuse_symlinked_parents(path)
    try:
        fd = os.open(path, _READ_FLAGS)
    except OSError as e:
        if e.errno == errno.ELOOP:  # O_NOFOLLOW met a symlink
            raise UnsafePathError(path, "it is a symlink") from e
        raise
    return _read_all(fd, path, limit)


def open_regular(path: Path | str) -> int:
    """Open a regular file to read, as :func:`read_bytes` does: no symlink, no blocking.

    For readers that read part of a file themselves (from the end, from an
    offset). The caller closes the descriptor; it never reads more than it
    needs, whatever ``st_size`` says.

    Raises:
        FileNotFoundError: the file does not exist.
        UnsafePathError: the path is a symlink.
        NotRegularFileError: it is a FIFO, a device, a socket or a directory.
    """
    try:
        fd = os.open(path, _READ_FLAGS)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise UnsafePathError(Path(path), "it is a symlink") from e
        raise
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise NotRegularFileError(Path(path), file_kind(mode))
    return fd


def file_kind(mode: int) -> str:
    """What a file of this ``st_mode`` is, in words ("a FIFO"). Pure."""
    return _KINDS.get(stat.S_IFMT(mode), "a regular file" if stat.S_ISREG(mode) else "unknown")


def open_dir(path: str) -> int:
    """Open a directory to read the files in it (:func:`read_bytes_at`), following no symlink.

    The directory is opened with ``O_NOFOLLOW`` and the one above it is
    checked, so a file read relative to the descriptor has the guard of
    :func:`read_bytes` (its two directories) for one ``open`` and one
    ``lstat``, whatever the number of files read. The caller closes it.

    Raises:
        FileNotFoundError: the directory does not exist.
        UnsafePathError: the directory or the one above it is a symlink.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as e:
        # With O_DIRECTORY, Linux says ENOTDIR (not ELOOP) for a symlink.
        if e.errno in (errno.ELOOP, errno.ENOTDIR) and os.path.islink(path):
            raise UnsafePathError(Path(path), "it is a symlink") from e
        raise
    parent = os.path.dirname(path)
    if os.path.islink(parent):
        os.close(fd)
        raise UnsafePathError(Path(parent), "it is a symlink")
    return fd


def open_at(dir_fd: int, name: str, path: str) -> int:
    """Open ``name`` in a directory from :func:`open_dir` for reading, following no symlink.

    ``path`` is the file's whole path, for errors.

    Raises:
        FileNotFoundError: the file does not exist.
        UnsafePathError: it is a symlink.
    """
    try:
        return os.open(name, _READ_FLAGS, dir_fd=dir_fd)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise UnsafePathError(Path(path), "it is a symlink") from e
        e.filename = path  # name the file, not its name inside the directory
        raise


def read_bytes_at(dir_fd: int, name: str, path: str) -> bytes:
    """:func:`read_bytes` of ``name`` in a directory from :func:`open_dir` (``path``: for errors).

    Raises:
        FileNotFoundError: the file does not exist.
        UnsafePathError: it is a symlink.
        NotRegularFileError: it is a FIFO, a device, a socket or a directory.
    """
    return _read_all(open_at(dir_fd, name, path), path, None)


def _read_all(fd: int, path: Path | str, limit: int | None) -> bytes:
    """The bytes of an open regular file, at most ``limit`` (or the cap); closes it."""
    # os.read, not a file object: building a buffered reader costs more than
    # reading a small file, and this runs for every file a status refresh reads.
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFileError(Path(path), file_kind(st.st_mode))
        cap = MAX_READ_BYTES if limit is None else limit
        # One byte past what is wanted tells a file that grew (or exceeds the cap) from one
        # that did not; never allocate more than the cap allows, whatever st_size says.
        want = min(st.st_size, cap) + 1
        data = os.read(fd, want)
        if len(data) < want:  # a short read of a regular file is its end
            return data
        chunks = [data]  # the file grew since fstat, or holds more than the cap
        total = len(data)
        while total <= cap and (chunk := os.read(fd, min(_READ_CHUNK, cap + 1 - total))):
            chunks.append(chunk)
            total += len(chunk)
        data = b"".join(chunks)
        if len(data) <= cap:
            return data
        if limit is not None:
            return data[:limit]
        raise FileTooLargeError(Path(path), max(st.st_size, len(data)), cap)
    finally:
        os.close(fd)


def parse_model(path: Path | str, model: type[M], data: bytes) -> M:
    """Validate ``data`` (JSON) as ``model``; a failure names the file (``path``) and the first problem.

    Raises:
        CorruptFileError: not JSON, or not the model's schema.
    """
    from pydantic import ValidationError  # noqa: PLC0415 - see TYPE_CHECKING above

    try:
        return model.model_validate_json(data)
    except ValidationError as e:
        raise CorruptFileError(Path(path), describe_validation_error(e)) from e


def read_model(path: Path, model: type[M]) -> M:
    """Read and validate a JSON file as ``model``.

    Raises:
        FileNotFoundError: the file does not exist.
        CorruptFileError: not JSON, or not the model's schema.
    """
    return parse_model(path, model, read_bytes(path))


def read_model_or_none(path: Path, model: type[M]) -> M | None:
    """Like :func:`read_model`, but None when the file does not exist."""
    try:
        return read_model(path, model)
    except FileNotFoundError:
        return None


def describe_validation_error(error: ValidationError) -> str:
    """One line naming the first problem of a pydantic error: where and what."""
    first = error.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "(top level)"
    more = error.error_count() - 1
    suffix = f" (and {more} more problem{'s' if more > 1 else ''})" if more else ""
    if first["type"] == "json_invalid":
        return f"not valid JSON: {first['msg']}{suffix}"
    return f"{where}: {first['msg']}{suffix}"
