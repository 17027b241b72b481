"""File primitives used everywhere: atomic write, exclusive create, keyed append, locks.

Every durable byte LoopX writes goes through this module, so the crash
guarantees are argued once:

* atomic write: temp file in the same directory, write, fsync, rename, fsync
  the directory. A reader sees the old or the new file, never a mix.
* exclusive create: ``O_CREAT|O_EXCL|O_NOFOLLOW``; exactly one creator wins.
* keyed append: one ``write`` per JSON line under a file lock; a record whose
  key is already among the file's recent records is skipped, so replaying an
  append is harmless. Readers ignore a torn last line.
* locks: ``filelock`` on ``<file>.lock``; a busy lock is retried with jittered
  backoff (tenacity) and ends in :class:`LockTimeoutError`. On a network
  filesystem (or with ``LOOPX_LOCK_MODE=soft``) the lock is a soft lock
  (:mod:`loopx.storage.softlock`) instead of flock.
"""

from __future__ import annotations

import contextlib
import contextvars
import fcntl
import json
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final, TypeVar

import filelock
from pydantic import BaseModel, ValidationError
from tenacity import (
    Retrying,
    retry_if_exception_type,
    stop_after_delay,
    wait_random_exponential,
)

from loopx.errors import CorruptFileError, LockTimeoutError, UnsafePathError
from loopx.storage.softlock import LockMode, SoftLock, lock_mode_for

DIR_MODE: Final = 0o700
FILE_MODE: Final = 0o600
DEFAULT_LOCK_TIMEOUT_S: Final = 30.0
# A replayed append can only repeat one of the newest records of a file: each
# keyed file belongs to one goal, whose writers are serialised by its lease.
DEDUP_SCAN_RECORDS: Final = 256
_READ_BLOCK: Final = 64 * 1024

M = TypeVar("M", bound=BaseModel)


# --- directories -------------------------------------------------------------------------------


def ensure_dir(path: Path) -> Path:
    """Create ``path`` (and parents) with mode 0700 if missing; refuse a symlink.

    Returns:
        ``path``.

    Raises:
        UnsafePathError: ``path`` is a symlink or not a directory.
    """
    refuse_symlinked_parents(path)
    try:
        st = path.lstat()
    except FileNotFoundError:
        path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
        st = path.lstat()
    if stat.S_ISLNK(st.st_mode):
        raise UnsafePathError(path, "it is a symlink")
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafePathError(path, "it is not a directory")
    return path


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
    A turn's claim (epoch counter and lease, one directory) and the phases
    between ``host_execute`` and ``scheduler_ack`` (recovery redoes them all,
    idempotently, until the terminal journal is written) are such groups.
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


def _refuse_symlink(path: Path) -> None:
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
    for directory in (parent, os.path.dirname(parent)):
        if os.path.islink(directory):
            raise UnsafePathError(Path(directory), "it is a symlink")


# --- whole files -------------------------------------------------------------------------------


def _write_all(fd: int, data: bytes) -> None:
    """Write every byte of ``data`` (``os.write`` may write fewer)."""
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
    _refuse_symlink(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, FILE_MODE)
    try:
        _write_all(fd, data)
        if durable:
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    os.close(fd)
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
    try:
        _write_all(fd, data)
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)
    if durable:
        fsync_dir(path.parent)
    return True


def read_bytes(path: Path) -> bytes:
    """Read a file without following a symlink at its last component.

    Raises:
        FileNotFoundError: the file does not exist.
        UnsafePathError: the path is a symlink.
    """
    refuse_symlinked_parents(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as e:
        if e.errno == 40:  # noqa: PLR2004 - ELOOP: O_NOFOLLOW met a symlink
            raise UnsafePathError(path, "it is a symlink") from e
        raise
    with os.fdopen(fd, "rb") as f:
        return f.read()


def parse_model(path: Path, model: type[M], data: bytes) -> M:
    """Validate ``data`` (JSON) as ``model``; a failure names the file and the first problem.

    Raises:
        CorruptFileError: not JSON, or not the model's schema.
    """
    try:
        return model.model_validate_json(data)
    except ValidationError as e:
        raise CorruptFileError(path, describe_validation_error(e)) from e


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


# --- JSON Lines --------------------------------------------------------------------------------


def _tail_lines(fd: int, size: int, want: int) -> list[bytes]:
    """The last ``want`` complete lines of an open file, oldest first."""
    pos = size
    buf = b""
    while pos > 0 and buf.count(b"\n") <= want:
        step = min(_READ_BLOCK, pos)
        pos -= step
        buf = os.pread(fd, step, pos) + buf
    lines = buf.split(b"\n")
    # The first piece may be a partial line when we stopped early; the last is
    # what follows the final newline (empty, or a torn record).
    complete = lines[:-1] if pos == 0 else lines[1:-1]
    return complete[-want:]


def _record_key(line: bytes, key_field: str) -> object:
    try:
        return json.loads(line).get(key_field)
    except (ValueError, AttributeError):
        return None


def append_record(
    path: Path,
    record: BaseModel,
    *,
    key_field: str = "turn_key",
    timeout: float = DEFAULT_LOCK_TIMEOUT_S,
) -> bool:
    """Append ``record`` as one JSON line unless a recent record has the same key.

    A torn last line (a writer died mid-record, so nobody was told it was
    written) is cut off first, so the new record starts on a line of its own.

    Returns:
        True if the record was written, False if its key was already there.
    """
    key = getattr(record, key_field)
    line = record.model_dump_json().encode() + b"\n"
    needle = _key_needle(key)
    _refuse_symlink(path)
    with locked(path, timeout=timeout):
        created = not path.exists()
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_APPEND, FILE_MODE)
        try:
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                size -= len(_torn_tail(fd, size))
                os.ftruncate(fd, size)
            if any(
                _record_key(old, key_field) == key
                for old in _tail_lines(fd, size, DEDUP_SCAN_RECORDS)
                if needle is None or needle in old or b"\\u" in old
            ):
                return False
            os.write(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)
        if created:
            fsync_dir(path.parent)
    return True


def _key_needle(key: object) -> bytes | None:
    """Bytes every JSON line naming string ``key`` contains (None: parse every line).

    Only lines holding the key's text, or a ``\\u`` escape (JSON may spell any
    character that way), can name it, so the dedup scan parses just those.
    Keys with characters JSON escapes otherwise (quote, backslash, slash,
    controls) are not filtered.
    """
    if not isinstance(key, str) or any(c in key for c in '"\\/') or not key.isprintable():
        return None
    return key.encode()


def _torn_tail(fd: int, size: int) -> bytes:
    """The bytes after the last newline of an open file."""
    pos = size
    tail = b""
    while pos > 0:
        step = min(_READ_BLOCK, pos)
        pos -= step
        tail = os.pread(fd, step, pos) + tail
        nl = tail.rfind(b"\n")
        if nl >= 0:
            return tail[nl + 1 :]
    return tail


def iter_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line_number, object)`` for each complete record of a JSON Lines file.

    A last line without its newline is a torn write and is skipped. Any other
    line that is not a JSON object is damage.

    Raises:
        CorruptFileError: a complete line is not a JSON object.
    """
    data = read_bytes(path)
    lines = data.split(b"\n")
    for number, raw in enumerate(lines[:-1], start=1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except ValueError as e:
            raise CorruptFileError(path, f"line {number} is not valid JSON: {e}") from e
        if not isinstance(obj, dict):
            raise CorruptFileError(path, f"line {number} is not a JSON object")
        yield number, obj


def read_records(path: Path, model: type[M]) -> list[M]:
    """All complete records of a JSON Lines file, validated as ``model``; [] if missing.

    Raises:
        CorruptFileError: a complete line is not JSON or not the model's schema.
    """
    if not path.exists():
        return []
    out = []
    for number, obj in iter_jsonl(path):
        try:
            out.append(model.model_validate(obj))
        except ValidationError as e:
            raise CorruptFileError(path, f"line {number}: {describe_validation_error(e)}") from e
    return out


# --- locks -------------------------------------------------------------------------------------


def lock_path_for(path: Path) -> Path:
    """The lock file guarding ``path``."""
    return path.with_name(path.name + ".lock")


@contextlib.contextmanager
def locked(path: Path, *, timeout: float = DEFAULT_LOCK_TIMEOUT_S) -> Iterator[None]:
    """Hold the file lock of ``path`` (``<path>.lock``) for a read-modify-write.

    Never hold it while a host runs. Not reentrant: do not nest two locks of
    the same file in one process.

    Raises:
        LockTimeoutError: the lock stayed busy for ``timeout`` seconds.
    """
    lock_file = lock_path_for(path)
    _refuse_symlink(lock_file)
    # A root on a network filesystem (or LOOPX_LOCK_MODE=soft) uses soft locks: see loopx.storage.softlock.
    lock: filelock.FileLock | SoftLock | _Flock
    if lock_mode_for(lock_file) is LockMode.SOFT:
        lock = SoftLock(lock_file)
    else:
        lock = _Flock(lock_file)
    try:
        lock.acquire(timeout=0)  # the common case, a free lock: no retry machinery
    except filelock.Timeout:
        _acquire_with_retries(lock, lock_file, timeout)
    try:
        yield
    finally:
        lock.release()


class _Flock:
    """The lock ``filelock.FileLock`` takes on Unix (``flock`` of ``<file>.lock``), minus its cost.

    Same file, mode and ``flock(LOCK_EX | LOCK_NB)``, so it excludes and is
    excluded by a ``filelock.FileLock`` on the same path; what it leaves out
    is filelock's per-call bookkeeping (singletons, fork tracking, thread
    state), which cost more than the lock on every turn (7 locks a turn).
    A lock file unlinked by a peer between our open and our flock is not
    trusted (retried), as filelock does. A filesystem without ``flock``
    falls back to ``filelock.FileLock`` itself.
    """

    def __init__(self, lock_file: Path) -> None:
        self._path = lock_file
        self._fd: int | None = None
        self._fallback: filelock.FileLock | None = None

    def acquire(self, timeout: float = 0) -> None:  # noqa: ARG002 - callers retry (tenacity)
        """Take the lock now or raise ``filelock.Timeout``."""
        if self._fallback is not None:
            self._fallback.acquire(timeout=0)
            return
        fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, FILE_MODE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise filelock.Timeout(str(self._path)) from None
        except OSError:  # no flock here (ENOSYS, ENOLCK...): let filelock decide
            os.close(fd)
            self._fallback = filelock.FileLock(str(self._path), mode=FILE_MODE, is_singleton=False)
            self._fallback.acquire(timeout=0)
            return
        if os.fstat(fd).st_nlink == 0:  # unlinked under us: a lock nobody else can see
            os.close(fd)
            raise filelock.Timeout(str(self._path))
        self._fd = fd

    def release(self) -> None:
        """Let the lock go."""
        if self._fallback is not None:
            self._fallback.release()
            return
        fd, self._fd = self._fd, None
        if fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)


def lock_busy(path: Path) -> bool:
    """Whether another holder has the file lock of ``path`` right now. A hint only.

    The answer may change the moment it is given; callers use it to try other
    work first, never to decide anything that needs the lock. A soft lock
    (network filesystems) is never reported busy.
    """
    lock_file = lock_path_for(path)
    if lock_mode_for(lock_file) is LockMode.SOFT:
        return False
    try:
        fd = os.open(lock_file, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return False  # no lock file yet (or unreadable): let the real acquire decide
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the same flock filelock takes
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)  # releases the probe's flock, if it got one
    return False


def _acquire_with_retries(
    lock: filelock.FileLock | SoftLock | _Flock, lock_file: Path, timeout: float
) -> None:
    """Retry a busy lock with jittered backoff until ``timeout``."""
    try:
        for attempt in Retrying(
            stop=stop_after_delay(timeout),
            wait=wait_random_exponential(multiplier=0.005, max=0.25),
            retry=retry_if_exception_type(filelock.Timeout),
            reraise=True,
        ):
            with attempt:
                lock.acquire(timeout=0)
    except filelock.Timeout as e:
        raise LockTimeoutError(lock_file, timeout) from e
