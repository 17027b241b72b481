"""The last ``loopx status --json`` document, kept so a warm CLI can print it as it is.

``projections/status.snapshot`` holds one JSON header line, then the document's
bytes exactly as they were printed. The header names the cache index the
document was assembled from (its ``generation`` and ``writer``) and what its
``fleet`` was computed from (:class:`FleetKey`). :func:`print_snapshot` prints
the document only while all of it still holds:

* the index on disk is the same generation by the same writer (no goal view
  changed since), within the TTL and with the same registry fingerprint: the
  rule :meth:`loopx.status.cache.StatusCache.refresh` applies to serve its cache;
* ``supervisor.json`` and every heartbeat file are the same files (inode,
  mtime, size); the processes they name are alive or gone as they were; the
  root's filesystem health is the same; and no heartbeat counted alive has
  grown stale since (the fleet is always current, issue 16).

Otherwise the caller assembles the document from the cache (and writes a new
snapshot). This module imports only the standard library, so a warm
``loopx status --json`` starts without pydantic or structlog (issue 14); the
header is therefore a plain class read with :mod:`json`, not a pydantic model
(nor a dataclass: :mod:`dataclasses` pulls in :mod:`inspect`, a tenth of a warm
run), and it is written by :func:`write_snapshot` from the same class.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
from datetime import datetime

from loopx.pids import pid_held
from loopx.storage.resources import root_health

# Not `from typing import ...`: a warm `loopx status --json` imports no typing (issue 14).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path
    from typing import BinaryIO, Final

    from loopx.root import Layout

SNAPSHOT_NAME: Final = "status.snapshot"
SCHEMA_VERSION: Final = 1
# The cache index's (StatusIndex) schema this reader knows, without importing its model.
INDEX_SCHEMA_VERSION: Final = 2

_HEADER_CHUNK: Final = 64 * 1024
_COPY_CHUNK: Final = 1024 * 1024
ProcessCheck = tuple[int, float, bool]  # (pid, started_at, was alive)


def stat_pair(path: str) -> tuple[int, int]:
    """``(mtime_ns, size)`` of a path, ``(0, -1)`` when absent."""
    try:
        st = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return 0, -1
    return st.st_mtime_ns, st.st_size


def snapshot_file(layout: Layout) -> Path:
    """``projections/status.snapshot``."""
    return layout.projections_dir / SNAPSHOT_NAME


def fleet_files(layout: Layout) -> list[tuple[str, int, int, int]]:
    """``(name, inode, mtime_ns, size)`` of ``supervisor.json`` and each heartbeat file.

    The same files :func:`loopx.status.sources.read_fleet` reads.
    """
    out: list[tuple[str, int, int, int]] = []
    with contextlib.suppress(FileNotFoundError):
        st = os.stat(layout.supervisor_file, follow_symlinks=False)
        out.append(("", st.st_ino, st.st_mtime_ns, st.st_size))
    out += _account_files(layout)
    try:
        entries = sorted(os.scandir(layout.agents_dir), key=lambda e: e.name)
    except FileNotFoundError:
        return out
    for entry in entries:
        if entry.name.endswith(".json") and not entry.name.startswith("."):
            with contextlib.suppress(FileNotFoundError):
                st = entry.stat(follow_symlinks=False)
                out.append((entry.name, st.st_ino, st.st_mtime_ns, st.st_size))
    return out


def _account_files(layout: Layout) -> list[tuple[str, int, int, int]]:
    """The account files the document's ``accounts`` and its overlay are read from (issue 27)."""
    out: list[tuple[str, int, int, int]] = []
    folder = os.path.join(layout.root, "accounts")
    try:
        names = sorted(e.name for e in os.scandir(folder) if e.is_dir(follow_symlinks=False))
    except (FileNotFoundError, NotADirectoryError):
        return out
    for name in names:
        for part in ("account.json", "state.json", "spend.json", "budget.json"):
            with contextlib.suppress(FileNotFoundError, NotADirectoryError):
                st = os.stat(os.path.join(folder, name, part), follow_symlinks=False)
                out.append((f"accounts/{name}/{part}", st.st_ino, st.st_mtime_ns, st.st_size))
    return out


class FleetKey:
    """What a fleet view was computed from, to tell later whether it still holds."""

    __slots__ = ("degraded", "files", "processes", "valid_until")

    def __init__(
        self,
        *,
        files: list[tuple[str, int, int, int]] | None = None,
        processes: list[ProcessCheck] | None = None,  # this host's, as checked
        degraded: str | None = None,
        valid_until: float | None = None,  # POSIX time the first counted heartbeat goes stale
    ) -> None:
        self.files = files if files is not None else []
        self.processes = processes if processes is not None else []
        self.degraded = degraded
        self.valid_until = valid_until

    def as_json(self) -> dict[str, object]:
        """The header's ``fleet`` object (what :func:`_key_from_json` reads back)."""
        return {
            "files": self.files,
            "processes": self.processes,
            "degraded": self.degraded,
            "valid_until": self.valid_until,
        }

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FleetKey) and self.as_json() == other.as_json()

    __hash__ = None  # type: ignore[assignment]  # mutable lists inside, like the dataclass's

    def holds(self, layout: Layout, *, now: float) -> bool:
        """Whether the fleet's sources are as they were when the key was taken."""
        if self.valid_until is not None and now >= self.valid_until:
            return False
        if fleet_files(layout) != self.files or root_health(layout.root) != self.degraded:
            return False
        return all(_runs(pid, started) == alive for pid, started, alive in self.processes)


def _runs(pid: int, started_at: float) -> bool:
    """Whether ``pid`` still runs the process started at ``started_at``.

    A pid nobody holds is answered without importing :mod:`loopx.process` (its
    dataclasses, and psutil, cost more than the rest of a warm ``loopx status``);
    otherwise the test of ``loopx.fleet.process_runs``.
    """
    if not pid_held(pid):
        return False
    from loopx.process import ProcessIdentity  # noqa: PLC0415 - see above

    return ProcessIdentity(pid, started_at).alive()


def _key_from_json(data: dict[str, object]) -> FleetKey:
    files = data.get("files", [])
    processes = data.get("processes", [])
    if not isinstance(files, list) or not isinstance(processes, list):
        msg = "fleet key: files and processes must be lists"
        raise TypeError(msg)
    degraded, valid_until = data.get("degraded"), data.get("valid_until")
    return FleetKey(
        files=[(str(n), int(i), int(m), int(s)) for n, i, m, s in files],
        processes=[(int(p), float(t), bool(a)) for p, t, a in processes],
        degraded=str(degraded) if degraded is not None else None,
        valid_until=float(valid_until) if isinstance(valid_until, int | float) else None,
    )


def write_snapshot(
    layout: Layout, *, generation: int, writer: str, fleet: FleetKey, document: bytes
) -> None:
    """Store ``document`` (the printed bytes) with its header; best effort, not fsynced.

    A lost or torn snapshot only means the next warm CLI assembles the document again.
    """
    header = {
        "schema_version": SCHEMA_VERSION,
        "generation": generation,
        "writer": writer,
        "fleet": fleet.as_json(),
    }
    path = snapshot_file(layout)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(json.dumps(header, separators=(",", ":")).encode() + b"\n")
            f.write(document)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()


def remove_snapshot(layout: Layout) -> None:
    """Delete the snapshot (``--clear-cache``)."""
    with contextlib.suppress(FileNotFoundError):
        snapshot_file(layout).unlink()


def _read(path: Path) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as f:
        return f.read()


def _header(fd: int) -> tuple[dict[str, object], int]:
    """The header line of an open snapshot and the offset of the document after it."""
    data = b""
    while b"\n" not in data:
        chunk = os.pread(fd, _HEADER_CHUNK, len(data))
        if not chunk:
            msg = "snapshot without a document"
            raise ValueError(msg)
        data += chunk
    cut = data.index(b"\n") + 1
    header = json.loads(data[:cut])
    if not isinstance(header, dict):
        msg = "snapshot header is not an object"
        raise TypeError(msg)
    return header, cut


def _holds(layout: Layout, header: dict[str, object], *, now: datetime, ttl_s: float) -> bool:
    index = json.loads(_read(layout.status_file))
    if (
        header.get("schema_version") != SCHEMA_VERSION
        or index.get("schema_version") != INDEX_SCHEMA_VERSION
    ):
        return False
    fleet = header["fleet"]
    if not isinstance(fleet, dict):
        return False
    return (
        (header.get("generation"), header.get("writer"))
        == (index.get("generation"), index.get("writer"))
        and (now - datetime.fromisoformat(index["checked_at"])).total_seconds() < ttl_s
        and list(stat_pair(str(layout.registry))) == index.get("registry_fp")
        and _key_from_json(fleet).holds(layout, now=now.timestamp())
    )


def _copy(fd: int, offset: int, out: int | BinaryIO) -> None:
    size = os.fstat(fd).st_size
    if isinstance(out, int):
        try:
            while offset < size:  # in the kernel, no copy through Python
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
        if isinstance(out, int):
            offset += os.write(out, chunk)  # a short write is continued from where it stopped
        else:
            out.write(chunk)
            offset += len(chunk)


def print_snapshot(layout: Layout, *, now: datetime, ttl_s: float, out: int | BinaryIO) -> bool:
    """Write the stored document to ``out`` (a file descriptor or a binary stream) if it holds.

    Returns:
        False, having written nothing, when there is no snapshot or it no longer
        holds; a missing, damaged or foreign file is never an error: it is a cache.
    """
    try:
        fd = os.open(snapshot_file(layout), os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        try:
            header, offset = _header(fd)
            if not _holds(layout, header, now=now, ttl_s=ttl_s):
                return False
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return False
        _copy(fd, offset, out)
        return True
    finally:
        os.close(fd)


__all__ = [
    "FleetKey",
    "fleet_files",
    "print_snapshot",
    "remove_snapshot",
    "snapshot_file",
    "stat_pair",
    "write_snapshot",
]
