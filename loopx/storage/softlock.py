"""Soft locks for a root on a network filesystem, and the choice between soft and flock locks.

``flock`` is unreliable on network filesystems (NFS emulates it with POSIX
byte-range locks through lockd, or not at all; CIFS, FUSE and several
cluster filesystems differ again), so a root on one uses *soft locks*: the
lock is the existence of ``<file>.lock``, created with ``O_CREAT|O_EXCL``
(atomic on NFSv3+, CephFS, Lustre, GlusterFS, SMB) and holding a holder
record (hostname, pid, start time, token, acquisition time). A holder that
died leaves its file behind, so a waiter breaks a lock whose holder is dead
on this host (never one whose holder still runs here), or, for a holder on
another host, whose record is older than ``stale_after_s`` (locks guard
millisecond read-modify-writes, never a host run).

Which kind: ``LOOPX_LOCK_MODE`` = ``flock`` | ``soft`` | ``auto`` (default).
``auto`` reads the lock directory's mount in ``/proc/self/mountinfo`` and
uses soft locks on a network or FUSE filesystem, flock elsewhere, so the
local default is unchanged.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import time
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Final

from loopx import environ
from loopx.errors import UsageError
from loopx.process import ProcessIdentity
from loopx.storage.dirs import opened_root_of

DEFAULT_STALE_S: Final = 20.0
# How long a holder on this host that still runs keeps its lock before a waiter breaks it:
# far longer than any stall; only a lock orphaned by a lost release gets that old.
LIVE_HOLDER_STALE_S: Final = 600.0
MOUNTINFO: Final = Path("/proc/self/mountinfo")
# Filesystems where flock cannot be trusted across machines (and often not at all).
NETWORK_FSTYPES: Final = frozenset(
    {
        "nfs", "nfs4", "cifs", "smb3", "smbfs", "ceph", "lustre", "glusterfs", "gpfs",
        "beegfs", "ocfs2", "gfs2", "9p", "afs", "efs", "orangefs", "pvfs2",
    }
)  # fmt: skip


class LockMode(StrEnum):
    """How ``loopx.storage.locks.locked`` locks."""

    FLOCK = "flock"  # filelock.FileLock: fcntl/flock on <file>.lock (local disks)
    SOFT = "soft"  # exclusive-create marker with holder record and stale detection
    AUTO = "auto"  # soft on a network or FUSE filesystem, flock elsewhere


class LockModeError(UsageError):
    """``LOOPX_LOCK_MODE`` names no known mode."""

    def __init__(self, value: str) -> None:
        super().__init__(
            f"{environ.LOCK_MODE}={value!r} is not a lock mode",
            hint=f"set {environ.LOCK_MODE} to one of: flock, soft, auto (default)",
        )
        self.value = value

    def __reduce__(self) -> tuple[object, ...]:
        return type(self), (self.value,)


def is_network_fstype(fstype: str) -> bool:
    """Whether flock is unreliable on a filesystem of this type. Pure."""
    base = fstype.lower()
    return base in NETWORK_FSTYPES or base == "fuse" or base.startswith(("fuse.", "fuseblk"))


def mount_fstype(mountinfo: str, path: str) -> str | None:
    """The filesystem type of the mount holding absolute ``path``, from mountinfo text. Pure.

    The longest mount point that is ``path`` or one of its parents wins (a
    later line wins a tie: it is mounted over the earlier one).
    """
    best: tuple[int, str] | None = None
    for line in mountinfo.splitlines():
        left, sep, right = line.partition(" - ")
        fields = left.split()
        if not sep or len(fields) < 5 or not right.split():  # noqa: PLR2004 - mountinfo layout
            continue
        point = fields[4].encode().decode("unicode_escape")
        inside = path == point or path.startswith(point.rstrip("/") + "/")
        if inside and (best is None or len(point) >= best[0]):
            best = (len(point), right.split()[0])
    return best[1] if best else None


def decide_mode(requested: str | None, fstype: str | None) -> LockMode:
    """The lock kind for a mode setting and a filesystem type. Pure.

    Raises:
        LockModeError: ``requested`` is not a mode.

    """
    try:
        mode = LockMode(requested or LockMode.AUTO)
    except ValueError as e:
        raise LockModeError(requested or "") from e
    if mode is not LockMode.AUTO:
        return mode
    return LockMode.SOFT if fstype is not None and is_network_fstype(fstype) else LockMode.FLOCK


_fstype_by_dev: dict[int, str | None] = {}
# A runtime root is one filesystem: its type is looked up once per root (at its first lock),
# not with a stat of the lock's directory at every lock.
_fstype_by_root: dict[str, str | None] = {}


def fstype_of(path: Path) -> str | None:
    """The filesystem type of the directory holding ``path``.

    Looked up once per runtime root this process opened (every lock of a turn
    is under it), else once per device.
    """
    root = opened_root_of(path)
    if root is None:
        return _fstype_of_dir(path.parent)
    if root not in _fstype_by_root:
        _fstype_by_root[root] = _fstype_of_dir(Path(root))
    return _fstype_by_root[root]


def _fstype_of_dir(directory: Path) -> str | None:
    """The filesystem type of ``directory`` (cached per device)."""
    try:
        dev = os.stat(directory).st_dev
    except OSError:
        return None
    if dev not in _fstype_by_dev:
        try:
            text = MOUNTINFO.read_text()
        except OSError:
            text = ""
        _fstype_by_dev[dev] = mount_fstype(text, str(directory.resolve()))
    return _fstype_by_dev[dev]


def lock_mode_for(path: Path) -> LockMode:
    """The lock kind for the lock file ``path`` under the current ``LOOPX_LOCK_MODE``."""
    requested = environ.text(environ.LOCK_MODE)
    if requested in (LockMode.FLOCK, LockMode.SOFT):
        return LockMode(requested)
    return decide_mode(requested, fstype_of(path))


# --- the soft lock ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HolderRecord:
    """What a soft lock file says about its holder."""

    hostname: str
    pid: int
    pid_started_at: float
    token: str
    acquired_at: float  # wall clock (time.time()) of the holder's host

    def encode(self) -> bytes:
        """The lock file's content."""
        return json.dumps(
            {
                "hostname": self.hostname,
                "pid": self.pid,
                "pid_started_at": self.pid_started_at,
                "token": self.token,
                "acquired_at": self.acquired_at,
            }
        ).encode()

    @classmethod
    def decode(cls, data: bytes) -> HolderRecord | None:
        """The record in a lock file, or None when it is torn or foreign."""
        try:
            obj = json.loads(data)
            return cls(
                str(obj["hostname"]),
                int(obj["pid"]),
                float(obj["pid_started_at"]),
                str(obj["token"]),
                float(obj["acquired_at"]),
            )
        except (ValueError, KeyError, TypeError):
            return None


def holder_is_stale(
    record: HolderRecord | None,
    *,
    hostname: str,
    pid_alive: bool,
    now: float,
    file_age_s: float,
    stale_after_s: float,
) -> bool:
    """Whether a soft lock may be broken. Pure.

    A holder on this host whose process is gone is stale at once; one whose
    process still runs is not broken by ``stale_after_s``: a holder stalled
    by a loaded machine (a slow fsync, a paused VM) or a wall clock stepped
    forward must not let a waiter in beside it. Only a lock it has held for
    :data:`LIVE_HOLDER_STALE_S` is broken, a bound for a lock orphaned by a
    lost release, never reached by a stall. Any other holder (another host,
    or a torn record) once the lock is older than ``stale_after_s``, which
    must exceed clock skew plus the longest time a holder keeps a lock.
    """
    if record is None:
        return file_age_s > stale_after_s
    if record.hostname == hostname:
        if not pid_alive:
            return True
        return now - record.acquired_at > max(stale_after_s, LIVE_HOLDER_STALE_S)
    return now - record.acquired_at > stale_after_s


class SoftLock:
    """An exclusive-create lock file with a holder record; ``acquire(timeout=0)`` like filelock's."""

    def __init__(self, path: Path, *, stale_after_s: float | None = None) -> None:
        self.path = path
        self.stale_after_s = (
            stale_after_s
            if stale_after_s is not None
            else environ.seconds(environ.SOFT_LOCK_STALE_S, DEFAULT_STALE_S)
        )
        self._record: HolderRecord | None = None

    def acquire(self, timeout: float = 0) -> None:  # noqa: ARG002 - callers retry (tenacity)
        """Take the lock now, breaking a stale one.

        Raises:
            filelock.Timeout: a live holder has it.

        """
        me = ProcessIdentity.current()
        record = HolderRecord(
            socket.gethostname(), me.pid, me.started_at, secrets.token_hex(8), time.time()
        )
        for _ in range(2):
            if self._create(record.encode()):
                self._record = record
                return
            if not self._break_if_stale():
                break
        import filelock  # noqa: PLC0415 - heavy, and needed only when the lock is busy

        raise filelock.Timeout(str(self.path))

    def _create(self, data: bytes) -> bool:
        """Create the lock file with its whole record, unless it exists.

        The record is written to a private file first and linked into place
        (``link`` is an exclusive create, atomic on NFS too), so the lock file
        never exists without its record: an empty lock file would read as a
        torn record, which a waiter breaks by age alone while its holder runs.
        """
        tmp = self.path.with_name(f".{self.path.name}.{secrets.token_hex(8)}.new")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
            finally:
                # close() flushes to the server: NFS close-to-open makes the record visible.
                os.close(fd)
            try:
                os.link(tmp, self.path)
            except FileExistsError:
                # NFS: a retried LINK whose first reply was lost fails although it worked.
                return os.stat(tmp).st_nlink == 2  # noqa: PLR2004 - tmp and the lock file
            return True
        finally:
            tmp.unlink(missing_ok=True)

    def _break_if_stale(self) -> bool:
        """Move a stale lock file aside (one breaker wins the rename); whether one was broken."""
        try:
            data = self.path.read_bytes()
            age = time.time() - self.path.stat().st_mtime
        except FileNotFoundError:
            return True  # released meanwhile: try again
        seen = HolderRecord.decode(data)
        stale = holder_is_stale(
            seen,
            hostname=socket.gethostname(),
            pid_alive=seen is not None and ProcessIdentity(seen.pid, seen.pid_started_at).alive(),
            now=time.time(),
            file_age_s=age,
            stale_after_s=self.stale_after_s,
        )
        if not stale:
            return False
        aside = self.path.with_name(f".{self.path.name}.stale.{secrets.token_hex(4)}")
        try:
            os.rename(self.path, aside)
        except FileNotFoundError:
            return True  # another waiter broke it first
        if aside.read_bytes() != data:
            # A fresh lock replaced the stale one between our read and rename: put it back.
            with contextlib.suppress(FileExistsError):  # a third racer took it meanwhile
                os.link(aside, self.path)
            aside.unlink(missing_ok=True)
            return False
        aside.unlink(missing_ok=True)
        return True

    def release(self) -> None:
        """Remove the lock file if it is still ours (a breaker may have taken it)."""
        record, self._record = self._record, None
        if record is None:
            return
        try:
            if HolderRecord.decode(self.path.read_bytes()) == record:
                self.path.unlink()
        except FileNotFoundError:
            return
