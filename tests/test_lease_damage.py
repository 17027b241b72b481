"""Damaged and empty leases heal: an empty one frees its goal at once, garbage after ttl + grace."""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from loopx.model import utcnow
from loopx.schedule.candidates import lease_expiry
from loopx.turn.damagedlease import damaged_lease_free_at
from loopx.turn.fencing import read_epoch
from loopx.turn.lease import claim
from loopx.turn.recovery import recover
from tests.turnkit import demo_goal, loopx, make_root

T0 = datetime(2030, 1, 1, tzinfo=UTC)


def test_the_damaged_lease_rule() -> None:
    """Empty: free at once; garbage: free one lease duration plus grace after its last change."""
    assert damaged_lease_free_at(0, T0, ttl_s=30, grace_s=30) is None
    assert damaged_lease_free_at(7, T0, ttl_s=30, grace_s=30) == T0 + timedelta(seconds=60)


def _age(path: Path, seconds: float) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then))


def test_an_empty_lease_is_taken_over_at_once_with_the_epoch_raised(tmp_path: Path) -> None:
    """What ENOSPC during a create used to leave no longer blocks the goal."""
    layout = make_root(tmp_path / "root")
    demo_goal(layout, "g", tmp_path / "work")
    layout.lease_file("g").write_bytes(b"")
    before = read_epoch(layout, "g")
    assert lease_expiry(layout, "g", now=utcnow()) is None
    got = claim(layout, "g", agent_id="a", now=utcnow())
    assert got.lease is not None
    assert got.lease.epoch == before + 1


def test_a_fresh_garbage_lease_blocks_until_ttl_plus_grace(tmp_path: Path) -> None:
    """Garbage just written may be a writer we cannot see: respected, but not for ever."""
    layout = make_root(tmp_path / "root")
    demo_goal(layout, "g", tmp_path / "work")
    path = layout.lease_file("g")
    path.write_bytes(b"\x00garbage{")
    now = utcnow()
    until = lease_expiry(layout, "g", now=now)
    assert until is not None
    assert until <= now + timedelta(seconds=60)  # ttl 30 + grace 30 by default
    assert claim(layout, "g", agent_id="a", now=now).lease is None
    _age(path, 61)
    assert lease_expiry(layout, "g", now=utcnow()) is None
    assert claim(layout, "g", agent_id="a", now=utcnow()).lease is not None


def test_the_grace_setting_is_one_setting(tmp_path: Path, monkeypatch) -> None:
    """LOOPX_LEASE_TTL_S and LOOPX_LEASE_GRACE_S reach select's view as well as the claim."""
    monkeypatch.setenv("LOOPX_LEASE_TTL_S", "1")
    monkeypatch.setenv("LOOPX_LEASE_GRACE_S", "1")
    layout = make_root(tmp_path / "root")
    demo_goal(layout, "g", tmp_path / "work")
    path = layout.lease_file("g")
    path.write_bytes(b"garbage")
    _age(path, 3)
    assert lease_expiry(layout, "g", now=utcnow()) is None


def test_recover_clears_an_old_garbage_lease(tmp_path: Path) -> None:
    """`recover` removes a damaged lease nobody can hold any more."""
    layout = make_root(tmp_path / "root")
    demo_goal(layout, "g", tmp_path / "work")
    path = layout.lease_file("g")
    path.write_bytes(b"garbage")
    _age(path, 120)
    recover(layout)
    assert not path.exists()


def test_until_idle_finishes_a_goal_behind_an_empty_lease(tmp_path: Path) -> None:
    """The fleet completes a goal whose lease file is empty instead of waiting for ever."""
    layout = make_root(tmp_path / "root")
    demo_goal(layout, "g", tmp_path / "work")
    layout.lease_file("g").write_bytes(b"")
    done = loopx(layout.root, "supervisor", "run", "--agents", "1", "--until-idle", timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
