"""Soft locks (root on a network filesystem): detection, stale holders, and the races under them."""

from __future__ import annotations

import functools
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import filelock
import pytest

from loopx.errors import LockTimeoutError
from loopx.model import utcnow
from loopx.process import ProcessIdentity
from loopx.root import goallock
from loopx.storage import locks
from loopx.storage.locks import locked
from loopx.storage.softlock import (
    LIVE_HOLDER_STALE_S,
    HolderRecord,
    LockMode,
    LockModeError,
    SoftLock,
    decide_mode,
    holder_is_stale,
    lock_mode_for,
    mount_fstype,
)
from loopx.turn.fencing import read_epoch
from loopx.turn.lease import claim
from tests.test_lease import _RACER
from tests.turnkit import cli_env, make_root

MOUNTINFO = """\
22 1 0:20 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
30 22 0:40 / /srv/loopx rw,relatime shared:9 - nfs4 server:/export rw,vers=4.2
31 30 0:41 / /srv/loopx/local rw - tmpfs tmpfs rw
32 22 0:42 / /mnt/ceph rw - ceph 10.0.0.1:/ rw
33 22 0:43 / /mnt/s3 rw - fuse.s3fs s3fs rw
"""


@pytest.mark.parametrize(
    ("path", "fstype"),
    [
        ("/home/me/root", "ext4"),
        ("/srv/loopx", "nfs4"),
        ("/srv/loopx/goals/g", "nfs4"),
        ("/srv/loopx/local/x", "tmpfs"),
        ("/srv/loopxy", "ext4"),
        ("/mnt/ceph/r", "ceph"),
        ("/mnt/s3/r", "fuse.s3fs"),
    ],
)
def test_mount_fstype_picks_the_longest_mount_point(path: str, fstype: str) -> None:
    """The root's filesystem type is that of the innermost mount holding it."""
    assert mount_fstype(MOUNTINFO, path) == fstype


@pytest.mark.parametrize(
    ("requested", "fstype", "mode"),
    [
        (None, "ext4", LockMode.FLOCK),
        (None, "nfs4", LockMode.SOFT),
        ("auto", "ceph", LockMode.SOFT),
        ("auto", "fuse.sshfs", LockMode.SOFT),
        ("auto", "cifs", LockMode.SOFT),
        ("flock", "nfs4", LockMode.FLOCK),
        ("soft", "ext4", LockMode.SOFT),
        (None, None, LockMode.FLOCK),
    ],
)
def test_decide_mode(requested: str | None, fstype: str | None, mode: LockMode) -> None:
    """auto: soft on network/FUSE filesystems, flock elsewhere; an explicit mode wins."""
    assert decide_mode(requested, fstype) is mode


def test_unknown_lock_mode_is_a_clear_error() -> None:
    """LOOPX_LOCK_MODE=bogus names the variable and the modes."""
    with pytest.raises(LockModeError, match="LOOPX_LOCK_MODE"):
        decide_mode("bogus", "ext4")


def test_local_default_stays_flock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A root on a local disk keeps flock locks by default."""
    monkeypatch.delenv("LOOPX_LOCK_MODE", raising=False)
    assert lock_mode_for(tmp_path / "x.lock") is LockMode.FLOCK


def test_stale_rule() -> None:
    """A dead local holder is stale at once, a live one never; others only past the stale age."""
    rec = HolderRecord("here", 1, 0.0, "t", acquired_at=100.0)
    kw = {"hostname": "here", "now": 105.0, "file_age_s": 5.0, "stale_after_s": 20.0}
    assert holder_is_stale(rec, pid_alive=False, **kw)
    assert not holder_is_stale(rec, pid_alive=True, **kw)
    assert not holder_is_stale(rec, pid_alive=False, **{**kw, "hostname": "there"})
    assert holder_is_stale(rec, pid_alive=False, **{**kw, "hostname": "there", "now": 121.0})
    # A live holder here keeps its lock past the stale age: stalled, or the wall clock stepped.
    assert not holder_is_stale(rec, pid_alive=True, **{**kw, "now": 121.0, "file_age_s": 21.0})
    assert holder_is_stale(rec, pid_alive=True, **{**kw, "now": 100.0 + LIVE_HOLDER_STALE_S + 1})
    assert holder_is_stale(None, pid_alive=False, **{**kw, "file_age_s": 21.0})


def _old_lock_of_this_live_process(path: Path, age_s: float) -> bytes:
    """A lock file held by this (live) process since ``age_s`` ago, as a stalled holder leaves it."""
    me = ProcessIdentity.current()
    then = time.time() - age_s
    data = HolderRecord(socket.gethostname(), me.pid, me.started_at, "stalled", then).encode()
    path.write_bytes(data)
    os.utime(path, (then, then))
    return data


def test_live_local_holder_keeps_its_lock_past_the_stale_age(tmp_path: Path) -> None:
    """A holder on this host that still runs is not broken by age (a stall, a clock step)."""
    path = tmp_path / "f.lock"
    data = _old_lock_of_this_live_process(path, age_s=300)
    with pytest.raises(filelock.Timeout):
        SoftLock(path, stale_after_s=20).acquire()
    assert path.read_bytes() == data
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.lock"]  # no stray record file


def test_claim_never_enters_a_stalled_claim_of_a_live_holder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CI race, step by step: a holder stalled inside its claim keeps the goal's lock.

    Agent a holds the goal's soft lock and has just created its lease file,
    not yet written (epoch 209), when the machine stalls it past the stale
    age (or the wall clock steps forward). Breaking its lock let agent b in:
    b took the empty lease over at once (epoch 210), then released it and
    claimed again (211), and a's fence check found "209 superseded by 211".
    """
    monkeypatch.setenv("LOOPX_LOCK_MODE", "soft")
    monkeypatch.setattr(goallock, "locked", functools.partial(locks.locked, timeout=0.3))
    layout = make_root(tmp_path / "root")
    layout.ensure_goal_dirs("g")
    layout.epoch_file("g").write_text("209\n")
    layout.lease_file("g").write_bytes(b"")  # a's exclusive create, before its write
    lock = locks.lock_path_for(layout.epoch_file("g"))
    data = _old_lock_of_this_live_process(lock, age_s=60)
    with pytest.raises(LockTimeoutError):
        claim(layout, "g", agent_id="b", now=utcnow())
    assert read_epoch(layout, "g") == 209
    assert lock.read_bytes() == data
    assert layout.lease_file("g").read_bytes() == b""


def test_soft_lock_excludes_and_records_its_holder(tmp_path: Path) -> None:
    """A held soft lock refuses a second taker and names its holder; release frees it."""
    path = tmp_path / "f.lock"
    first, second = SoftLock(path), SoftLock(path)
    first.acquire()
    record = HolderRecord.decode(path.read_bytes())
    assert record is not None and record.pid == os.getpid()
    with pytest.raises(filelock.Timeout):
        second.acquire()
    first.release()
    assert not path.exists()
    second.acquire()
    second.release()


def test_lock_of_a_sigkilled_holder_is_broken(tmp_path: Path) -> None:
    """A holder that died holding the lock (same host) does not block the next taker."""
    path = tmp_path / "f.lock"
    code = f"from pathlib import Path; from loopx.storage.softlock import SoftLock; SoftLock(Path({str(path)!r})).acquire(); import os; os._exit(137)"
    assert (
        subprocess.run([sys.executable, "-c", code], check=False, env=cli_env()).returncode == 137
    )
    assert path.exists()
    lock = SoftLock(path)
    lock.acquire()
    lock.release()


def test_lease_race_under_soft_locks(tmp_path: Path) -> None:
    """Two processes racing claims under LOOPX_LOCK_MODE=soft are never inside a turn together."""
    layout = make_root(tmp_path / "root")
    go = tmp_path / "go"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _RACER, str(layout.root), name, str(go)],
            stdout=subprocess.PIPE,
            text=True,
            env=cli_env(LOOPX_LOCK_MODE="soft"),
        )
        for name in ("a", "b")
    ]
    try:
        go.touch()
        outs = [p.communicate(timeout=180)[0].split() for p in procs]
    finally:
        for p in procs:
            p.kill()
            p.wait()
    claims = [int(o[0]) for o in outs]
    assert [int(o[1]) for o in outs] == [0, 0]
    assert read_epoch(layout, "g") == sum(claims)
    assert not list((layout.root / "goals" / "g").glob("*.lock"))  # every soft lock released


def test_registry_concurrency_under_soft_locks(tmp_path: Path) -> None:
    """Ten concurrent `goal add` under soft locks: all ten registered, no lock left."""
    root = tmp_path / "root"
    env = cli_env(LOOPX_LOCK_MODE="soft")
    base = [sys.executable, "-m", "loopx", "--root", str(root)]
    subprocess.run([*base, "init"], env=env, check=True, capture_output=True)
    procs = [
        subprocess.Popen(
            [*base, "goal", "add", f"g{i}", "--objective", f"o{i}", "--workdir", str(tmp_path)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for i in range(10)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0] * 10, [err for _, err in outs]
    import json

    goals = [json.loads(p.read_text())["id"] for p in (root / "goals").glob("*/goal.json")]
    assert sorted(goals) == sorted(f"g{i}" for i in range(10))
    assert not list((root / "goals").glob("*/goal.json.lock"))


def test_locked_uses_soft_locks_when_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """LOOPX_LOCK_MODE=soft: files.locked holds an exclusive-create lock file with a holder record."""
    monkeypatch.setenv("LOOPX_LOCK_MODE", "soft")
    target = tmp_path / "data.json"
    with locked(target):
        record = HolderRecord.decode((tmp_path / "data.json.lock").read_bytes())
        assert record is not None and record.pid == os.getpid()
    assert not (tmp_path / "data.json.lock").exists()
