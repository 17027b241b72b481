"""Stored answers replayed while their inputs hold: the warm ``status --json`` and ``quota should-run``.

A memo is one file: a JSON header line, then the answer's bytes as they were
printed. The header holds the fingerprint (:func:`fingerprint`) of every file
the answer was computed from, the instant it was computed, a valid-until
time, an exit code and, where a part of the answer moves with the clock
(a decision's ``decided_at``), the holes the caller fills again at replay.
:func:`replay` gives the bytes back while every fingerprint is the same and
the clock is before the valid-until time; otherwise it misses. A missing,
damaged or foreign memo is a miss, never an error: it is a cache.

A remembered call (:func:`remember`, :func:`recall`) is a small JSON object
kept under a key: the CLI keeps there, under its exact command line, the
arguments argparse gave the call that tries a memo, so the next run of the
same line tries it without parsing anything (:mod:`loopx.api._warm`).

Standard library only, and no :mod:`typing` at run time: a warm CLI answers
from here before it imports pydantic, argparse or structlog. The
one fingerprint function of the project lives here too.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import time
import zlib

# Not `from typing import ...`: a warm `loopx status --json` starts without importing it.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from typing import BinaryIO, Final

Fingerprint = tuple[int, int, int]  # (inode, mtime_ns, size)
ABSENT: Final = (0, 0, -1)  # a missing file's fingerprint
SCHEMA_VERSION: Final = 1
_MAX_HEADER: Final = 4 * 1024 * 1024
_COPY_CHUNK: Final = 1024 * 1024


def fingerprint(path: str | os.PathLike[str]) -> Fingerprint:
    """``(inode, mtime_ns, size)`` of ``path`` (not followed if a link); :data:`ABSENT` if missing.

    The inode catches an atomic rewrite of the same size within one mtime tick
    (every atomic write renames a new inode into place).
    """
    try:
        st = os.stat(path, follow_symlinks=False)
    except (FileNotFoundError, NotADirectoryError):
        return ABSENT
    return st.st_ino, st.st_mtime_ns, st.st_size


def host_cache_dir(root: str | os.PathLike[str], *, env: dict[str, str] | None = None) -> str:
    """The private cache directory of ``root`` on this host (:func:`private_dir` makes it).

    ``$XDG_CACHE_HOME/loopx/<digest>`` (``~/.cache`` without it), keyed by the
    root's real path, device and inode: never on the root itself, which may be
    a filesystem shared between machines (the Ray back-end) where SQLite's
    locking is unsound and another host's processes are not ours to judge.
    """
    real = os.path.realpath(root)
    st = os.stat(real)
    # zlib, not hashlib: importing hashlib (OpenSSL) costs a warm answer milliseconds.
    name = f"{st.st_dev:x}-{st.st_ino:x}-{zlib.crc32(real.encode()):08x}"
    return os.path.join(cache_base(env), name)


def cache_base(env: dict[str, str] | None = None) -> str:
    """``$XDG_CACHE_HOME/loopx`` (``~/.cache/loopx`` without it): this user's LoopX caches."""
    environ = os.environ if env is None else env
    base = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "loopx")


def private_dir(path: str | os.PathLike[str]) -> None:
    """Make ``path`` and each missing parent ``0700``, whatever the umask; nothing if it exists.

    Not :func:`os.makedirs`: it makes the parents with the umask's mode (the
    cache base ``~/.cache/loopx`` came out ``0755``), and its ``mode`` passes
    through the umask too. A missing ``~/.cache`` is made ``0700`` as well, as
    the XDG base directory spec asks; an existing directory is left as it is.

    Raises:
        FileExistsError: ``path`` or a parent is something other than a directory.
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        return
    parent = os.path.dirname(os.path.abspath(path))
    if parent != os.path.abspath(path):
        private_dir(parent)
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        if not os.path.isdir(path):
            raise
        return  # another process made it (and made it private)
    os.chmod(path, 0o700)  # mkdir's mode passes through the umask


def store(
    path: str,
    body: bytes,
    *,
    inputs: Iterable[str],
    computed_at: float,
    valid_until: float | None,
    exit_code: int = 0,
    holes: Iterable[tuple[int, int, str]] = (),
    before: dict[str, Fingerprint] | None = None,
    key: str = "",
) -> bool:
    """Store ``body`` as the answer computed at ``computed_at`` from ``inputs``; best effort.

    ``holes`` are ``(start, end, name)`` byte ranges of ``body`` that
    :func:`replay` asks its ``fill`` for again. ``before`` are the inputs'
    fingerprints taken before the answer read them: a file that changed while
    it was computed leaves no memo. ``key`` names what else the answer
    depends on (the program's version, the registry it was opened with);
    :func:`replay` misses unless given the same. Written atomically, not fsynced: a lost
    memo only means the next call computes the answer again.

    Returns:
        Whether the memo was written.
    """
    files = {name: fingerprint(name) for name in inputs}
    if before is not None and any(before.get(n, fp) != fp for n, fp in files.items()):
        return False
    header = {
        "schema_version": SCHEMA_VERSION,
        "key": key,
        "inputs": [[name, *fp] for name, fp in files.items()],
        "computed_at": computed_at,
        "valid_until": valid_until,
        "exit_code": exit_code,
        "holes": [list(h) for h in sorted(holes)],
    }
    return _write_file(path, _dumps(header) + b"\n", body)


def _dumps(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def _write_file(path: str, *chunks: bytes) -> bool:
    """Write ``path`` atomically (``0600``, its directory made private), not fsynced; whether it was."""
    tmp = f"{path}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    try:
        private_dir(os.path.dirname(path))
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        os.fchmod(fd, 0o600)  # open's mode passes through the umask
        with os.fdopen(fd, "wb") as f:
            for chunk in chunks:
                f.write(chunk)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        return False
    return True


def replay(
    path: str,
    out: int | BinaryIO,
    *,
    now: float | None = None,
    max_age: float | None = None,
    fill: Callable[[str], bytes | None] | None = None,
    key: str = "",
) -> int | None:
    """Write the stored answer to ``out`` (a file descriptor or binary stream) while it holds.

    It holds while ``key`` is the one it was stored with, the clock is before
    its valid-until time (and, with ``max_age``, within that many seconds of
    when it was computed, never before it) and every input has the
    fingerprint it had. Each hole is filled by ``fill`` (a memo with holes and
    no ``fill``, or a hole ``fill`` answers None for, misses).

    Returns:
        The stored exit code, or None (a miss) having written nothing.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        with os.fdopen(fd, "rb") as f:
            line = f.readline(_MAX_HEADER)
            header = json.loads(line)
            at = time.time() if now is None else now
            if header["key"] != key or not _holds(header, at, max_age):
                return None
            code = int(header["exit_code"])
            holes = header["holes"]
            if not holes:
                _copy(f.fileno(), len(line), out)
                return code
            data = _filled(f.read(), holes, fill)
    except (OSError, ValueError, KeyError, TypeError, IndexError, _Unfilled):
        return None
    _write(out, data)
    return code


def _copy(fd: int, offset: int, out: int | BinaryIO) -> None:
    """The file from ``offset`` to ``out``: in the kernel where it can (``sendfile``)."""
    size = os.fstat(fd).st_size
    if isinstance(out, int):
        try:
            while offset < size:
                sent = os.sendfile(out, fd, offset, size - offset)
                if sent == 0:
                    break
                offset += sent
        except OSError as e:
            if e.errno not in (errno.EINVAL, errno.ENOSYS):  # this output takes no sendfile
                raise
        else:
            return
    while chunk := os.pread(fd, _COPY_CHUNK, offset):
        _write(out, chunk)
        offset += len(chunk)


def _write(out: int | BinaryIO, data: bytes) -> None:
    if isinstance(out, int):
        view = memoryview(data)
        while view:
            view = view[os.write(out, view) :]  # a short write is continued
    else:
        out.write(data)


class _Unfilled(Exception):  # noqa: N818 - internal control flow: a hole had no value
    """A hole the caller could not fill: the memo misses."""


def _holds(header: dict[str, object], now: float, max_age: float | None) -> bool:
    computed_at, until = header["computed_at"], header["valid_until"]
    if header["schema_version"] != SCHEMA_VERSION or not isinstance(computed_at, int | float):
        return False
    if now < computed_at or (max_age is not None and now - computed_at >= max_age):
        return False  # a clock set back could bring an old answer back
    if until is not None and not (isinstance(until, int | float) and now < until):
        return False
    inputs = header["inputs"]
    if not isinstance(inputs, list):
        return False
    return all(fingerprint(name) == (ino, mtime, size) for name, ino, mtime, size in inputs)


def fill_holes(
    body: bytes, holes: Iterable[Iterable[object]], fill: Callable[[str], bytes | None] | None
) -> bytes | None:
    """``body`` with each ``(start, end, name)`` hole replaced by ``fill(name)``; None if one has none."""
    try:
        return _filled(body, sorted(list(h) for h in holes), fill)
    except _Unfilled:
        return None


def _filled(
    body: bytes, holes: list[list[object]], fill: Callable[[str], bytes | None] | None
) -> bytes:
    if not holes:
        return body
    if fill is None:
        raise _Unfilled
    pieces: list[bytes] = []
    at = 0
    for start, end, name in holes:
        value = fill(str(name))
        if value is None or not (isinstance(start, int) and isinstance(end, int) and at <= start):
            raise _Unfilled
        pieces += (body[at:start], value)
        at = end
    pieces.append(body[at:])
    return b"".join(pieces)


# The remembered calls share this many files: the folder stays under a megabyte however many
# command lines (a should-run per goal, per root) are run. Two lines in one slot take turns.
CALL_SLOTS: Final = 4096


def _call_path(key: str, env: dict[str, str] | None) -> str:
    slot = zlib.crc32(key.encode()) % CALL_SLOTS
    return os.path.join(cache_base(env), "calls", f"{slot:03x}.json")


def remember(key: str, call: dict[str, object], *, env: dict[str, str] | None = None) -> bool:
    """Keep ``call`` (a JSON object) under ``key`` for :func:`recall`; best effort.

    One small file in the cache base, one of :data:`CALL_SLOTS` chosen by a
    checksum of ``key``, holding ``key`` whole (another key of the same slot
    replaces it, and is a miss for this one until it is kept again).
    An unchanged one is not written again. Returns whether ``call`` is kept.
    """
    path = _call_path(key, env)
    body = _dumps({"schema_version": SCHEMA_VERSION, "key": key, "call": call})
    return _read(path, len(body) + 1) == body or _write_file(path, body)


def _read(path: str, limit: int) -> bytes | None:
    """Up to ``limit`` bytes of ``path`` (not followed if a link), or None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        return f.read(limit)


def recall(key: str, *, env: dict[str, str] | None = None) -> dict[str, object] | None:
    """The call :func:`remember` kept under ``key``, or None (missing, damaged, another key's)."""
    try:
        kept = json.loads(_read(_call_path(key, env), _MAX_HEADER) or b"null")
        ok = kept["schema_version"] == SCHEMA_VERSION and kept["key"] == key
    except (OSError, ValueError, KeyError, TypeError):
        return None
    call = kept["call"]
    return call if ok and isinstance(call, dict) else None


def remove(path: str) -> None:
    """Delete a memo (``--clear-cache``); a missing one is fine."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


__all__ = [
    "ABSENT",
    "Fingerprint",
    "cache_base",
    "fill_holes",
    "fingerprint",
    "host_cache_dir",
    "private_dir",
    "recall",
    "remember",
    "remove",
    "replay",
    "store",
]
