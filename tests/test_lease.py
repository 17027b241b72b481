"""Leases: exclusive claims, takeover rules, fencing of a stale holder (real processes)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from loopx.errors import LeaseLostError
from loopx.model import utcnow
from loopx.turn.fencing import Fence, read_epoch
from loopx.turn.lease import (
    Holder,
    Lease,
    claim,
    fence_of,
    read_lease,
    release,
    renew,
    takeover_allowed,
)
from tests.turnkit import cli_env, demo_goal, demo_runs, make_root

NOW = datetime(2030, 1, 1, tzinfo=UTC)


def _lease(expires_in: float) -> Lease:
    return Lease(
        goal_id="g",
        agent_id="a",
        pid=1,
        pid_started_at=0.0,
        hostname="h",
        epoch=1,
        acquired_at=NOW,
        renewed_at=NOW,
        expires_at=NOW + timedelta(seconds=expires_in),
    )


@pytest.mark.parametrize(
    ("holder", "expires_in", "allowed"),
    [
        (Holder.DEAD, 30, True),  # a dead holder writes nothing more
        (Holder.ALIVE, 30, False),
        (Holder.ALIVE, -5, False),  # expired but inside the grace period
        (Holder.ALIVE, -11, True),
        (Holder.UNKNOWN, -5, False),
        (Holder.UNKNOWN, -11, True),
    ],
)
def test_takeover_rule(holder, expires_in, allowed):
    """Takeover needs a dead holder, or expiry plus the grace period."""
    assert takeover_allowed(_lease(expires_in), holder, now=NOW, grace_s=10) is allowed


def test_second_claim_is_blocked_and_release_frees(tmp_path):
    """A live holder blocks a claim until it releases; each claim raises the epoch."""
    layout = make_root(tmp_path / "root")
    first = claim(layout, "g", agent_id="a", now=utcnow())
    assert first.lease is not None
    blocked = claim(layout, "g", agent_id="b", now=utcnow())
    assert blocked.lease is None
    assert blocked.blocking is not None and blocked.blocking.agent_id == "a"
    assert release(layout, first.lease)
    second = claim(layout, "g", agent_id="b", now=utcnow())
    assert second.lease is not None and second.lease.epoch == first.lease.epoch + 1


def test_a_lease_this_process_left_is_reclaimed_at_once_only_when_asked(tmp_path):
    """A turn a resource error cut short leaves our own lease: reclaim_own takes it, epoch raised."""
    layout = make_root(tmp_path / "root")
    left = claim(layout, "g", agent_id="a", now=utcnow())
    assert left.lease is not None
    assert claim(layout, "g", agent_id="a", now=utcnow()).lease is None  # live holder: us
    again = claim(layout, "g", agent_id="a", now=utcnow(), reclaim_own=True)
    assert again.lease is not None and again.lease.epoch == left.lease.epoch + 1
    assert again.took_over is not None and again.took_over.epoch == left.lease.epoch


def test_stale_fence_refuses_and_renew_fails(tmp_path):
    """After a takeover the old holder's fence and renewal raise LeaseLostError."""
    layout = make_root(tmp_path / "root")
    old = claim(layout, "g", agent_id="a", now=utcnow(), ttl_s=0.01).lease
    assert old is not None
    new = claim(layout, "g", agent_id="b", now=utcnow() + timedelta(seconds=1), grace_s=0.5).lease
    assert new is not None and new.epoch == old.epoch + 1
    with pytest.raises(LeaseLostError), fence_of(layout, old).held():
        pass
    with pytest.raises(LeaseLostError):
        renew(layout, old, now=utcnow())
    fence_of(layout, new).check()
    assert not release(layout, old)
    assert read_lease(layout, "g") == new


_RACER = """
import os, sys, time
from pathlib import Path
from loopx.turn.lease import claim, fence_of, release
from loopx.model import utcnow
from loopx.root import Layout
layout = Layout.at(Path(sys.argv[1])); me = sys.argv[2]; go = Path(sys.argv[3])
while not go.exists():
    pass
marker = layout.root / "running"
claims = clashes = 0
# Bounded by time, not by attempts: how many attempts fail while the other holds the
# lease depends on scheduling. A livelock fails the test (claims < 250), never hangs it.
deadline = time.monotonic() + 90
while claims < 250 and time.monotonic() < deadline:
    lease = claim(layout, "g", agent_id=me, now=utcnow()).lease
    if lease is None:
        continue
    claims += 1
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        clashes += 1
    else:
        with fence_of(layout, lease).held():
            os.write(fd, me.encode())
        os.close(fd)
        os.unlink(marker)
    release(layout, lease)
print(claims, clashes)
"""


def test_two_agents_racing_500_times_never_both_run(tmp_path):
    """Two processes claiming one goal 250 times each are never inside a turn together."""
    layout = make_root(tmp_path / "root")
    go = tmp_path / "go"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _RACER, str(layout.root), name, str(go)],
            stdout=subprocess.PIPE,
            text=True,
            env=cli_env(),
        )
        for name in ("a", "b")
    ]
    try:
        go.touch()
        outs = [p.communicate(timeout=120)[0].split() for p in procs]
    finally:
        for p in procs:
            p.kill()
            p.wait()
    claims = [int(o[0]) for o in outs]
    clashes = [int(o[1]) for o in outs]
    assert clashes == [0, 0]
    assert claims == [250, 250]  # both made progress; nobody starved the race out
    assert read_epoch(layout, "g") == sum(claims)


def _wait(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def _holds_a_lock(pid: int) -> bool:
    """Whether ``pid`` holds a file lock right now (per /proc/locks)."""
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.replace("->", "").split()
        if len(fields) > 4 and fields[4] == str(pid):
            return True
    return False


def _freeze_outside_locks(pid: int) -> None:
    """SIGSTOP ``pid`` at a moment it holds no file lock.

    Frozen inside a lease renewal (a few ms under the goal's lock, every
    ttl/3), it would block the taker on that lock instead of losing the lease,
    which is not the case under test.
    """
    for _ in range(200):
        os.kill(pid, signal.SIGSTOP)
        if not _holds_a_lock(pid):
            return
        os.kill(pid, signal.SIGCONT)
        time.sleep(0.01)
    pytest.fail(f"process {pid} always held a lock")


def _files(goal_dir: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(goal_dir)): p.read_bytes()
        for p in sorted(goal_dir.rglob("*"))
        if p.is_file() and not p.name.endswith(".lock")
    }


def test_frozen_holder_taken_over_writes_nothing_after_sigcont(tmp_path):
    """A SIGSTOPped holder whose lease is taken over cannot write anything once resumed."""
    layout = make_root(tmp_path / "root")
    wd = tmp_path / "wd"
    demo_goal(layout, "g", wd, "--hang", "1.5")
    env = cli_env(LOOPX_LEASE_TTL_S="0.6", LOOPX_LEASE_GRACE_S="0.3", LOOPX_KILL_GRACE_S="0.3")
    cmd = [sys.executable, "-m", "loopx", "--root", str(layout.root), "turn", "run-once", "g"]
    holder = subprocess.Popen(
        [*cmd, "--agent-id", "frozen", "--json"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait(lambda: len(demo_runs(wd)) == 1, 30, "the first host to start")
        _freeze_outside_locks(holder.pid)
        lease = read_lease(layout, "g")
        assert lease is not None and lease.agent_id == "frozen"
        free_at = lease.expires_at + timedelta(seconds=0.4)
        _wait(lambda: utcnow() > free_at, 10, "the frozen lease to expire past its grace")
        taker = subprocess.run(
            [*cmd, "--agent-id", "taker"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert taker.returncode == 0, taker.stdout + taker.stderr
        before = _files(layout.goal_dir("g"))
        os.kill(holder.pid, signal.SIGCONT)
        out, _ = holder.communicate(timeout=60)
    finally:
        if holder.poll() is None:
            os.kill(holder.pid, signal.SIGCONT)
            holder.kill()
        holder.wait()
    assert json.loads(out)["report"]["failure"]["reason"] == "lease_lost"
    assert _files(layout.goal_dir("g")) == before
    journal = json.loads(next(layout.turns_dir("g").glob("*.json")).read_text())
    assert (journal["status"], journal["attempt"]) == ("committed", 2)


def test_fence_check_reads_the_counter(tmp_path):
    """A fence is valid exactly while the goal's counter equals its epoch."""
    layout = make_root(tmp_path / "root")
    lease = claim(layout, "g", agent_id="a", now=utcnow()).lease
    assert lease is not None
    Fence(layout, "g", lease.epoch).check()
    with pytest.raises(LeaseLostError):
        Fence(layout, "g", lease.epoch - 1).check()
