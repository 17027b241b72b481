"""JSON Lines files: keyed append under the file's lock, and reading that ignores a torn tail.

* keyed append: one ``write`` per JSON line under the file lock; a record
  whose key is already among the file's recent records is skipped, so
  replaying an append is harmless. A torn last line is cut off first.
* reading: a last line without its newline is a torn write and is skipped;
  any other line that is not a JSON object is damage.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final, TypeVar

from pydantic import BaseModel, ValidationError

from loopx.errors import CorruptFileError
from loopx.faults import io_fault_point
from loopx.storage.dirs import fsync_dir, refuse_symlink
from loopx.storage.files import FILE_MODE, describe_validation_error, read_bytes
from loopx.storage.locks import DEFAULT_LOCK_TIMEOUT_S, locked

# A replayed append can only repeat one of the newest records of a file: each
# keyed file belongs to one goal, whose writers are serialised by its lease.
DEDUP_SCAN_RECORDS: Final = 256
_READ_BLOCK: Final = 64 * 1024

M = TypeVar("M", bound=BaseModel)


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
    refuse_symlink(path)
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
            io_fault_point(path)
            os.write(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)
        if created:
            fsync_dir(path.parent)
    return True


def _key_needle(key: object) -> bytes | None:
    r"""Bytes every JSON line naming string ``key`` contains (None: parse every line).

    Only lines holding the key's text, or a ``\u`` escape (JSON may spell any
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
