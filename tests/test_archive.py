"""`loopx archive`: move a goal aside by rename, refuse the unsafe cases."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from loopx.errors import GoalStateError, InvalidGoalIdError
from loopx.model import utcnow
from loopx.registry.catalog import load_registry
from loopx.registry.goalrecords import GoalStatus
from loopx.registry.goals import set_status
from loopx.retention.archive import CrossDeviceArchiveError, LiveLeaseError, archive_goal
from loopx.testing.status_fixtures import register_goals, seed_goal, write_lease
from tests.conftest import Cli


@pytest.fixture
def cli(cli: Cli) -> Cli:
    """What commands print and decide is the point here: the CLI runs in this process."""
    return cli.in_process()


def only_policy_left(layout, goal_id: str) -> bool:
    """The goal's files moved away; its archived policy (goal.json) keeps the id registered."""
    return set(os.listdir(layout.goal_dir(goal_id))) == {"goal.json"}


def paused_goal(layout, goal_id: str = "g1"):
    now = utcnow()
    register_goals(layout, [seed_goal(layout, goal_id, now=now, history=2, workdir=layout.root)])
    set_status(layout, goal_id, GoalStatus.PAUSED, now=now)
    return now


def test_archive_moves_and_marks(layout):
    """A paused goal's directory is renamed into archived-goals/ and marked archived."""
    now = paused_goal(layout)
    result = archive_goal(layout, "g1", now=now)
    dest = Path(result.destination)
    assert (dest.parent, dest.name) == (layout.archive_dir, f"g1-{now:%Y%m%dT%H%M%SZ}")
    assert (dest / "history.jsonl").exists() and only_policy_left(layout, "g1")
    assert load_registry(layout).goals["g1"].status is GoalStatus.ARCHIVED
    assert result.summary_markdown.startswith("# Archived goal `g1`")


def test_dry_run_changes_nothing(layout):
    """--dry-run names the destination and leaves files and registry as they were."""
    now = paused_goal(layout)
    result = archive_goal(layout, "g1", now=now, dry_run=True)
    assert result.dry_run and layout.goal_dir("g1").is_dir()
    assert not Path(result.destination).exists()
    assert load_registry(layout).goals["g1"].status is GoalStatus.PAUSED


def test_active_goal_is_refused(layout):
    """An active registered goal is refused without --allow-registered."""
    now = utcnow()
    register_goals(layout, [seed_goal(layout, "g1", now=now, history=1, workdir=layout.root)])
    with pytest.raises(GoalStateError, match="active"):
        archive_goal(layout, "g1", now=now)
    assert layout.goal_dir("g1").is_dir()


def test_allow_registered_archives_an_active_goal(layout):
    """--allow-registered archives an active goal."""
    now = utcnow()
    register_goals(layout, [seed_goal(layout, "g1", now=now, history=1, workdir=layout.root)])
    archive_goal(layout, "g1", now=now, allow_registered=True)
    assert only_policy_left(layout, "g1")


def test_live_lease_is_refused(layout):
    """A goal whose lease is live is never moved."""
    now = paused_goal(layout)
    write_lease(layout, "g1", now=now)
    with pytest.raises(LiveLeaseError):
        archive_goal(layout, "g1", now=now)
    assert layout.lease_file("g1").exists()


def test_collision_gets_a_suffix(layout):
    """A second archive in the same second gets the suffix _1."""
    now = paused_goal(layout)
    first = archive_goal(layout, "g1", now=now)
    seed_goal(layout, "g1", now=now, history=1, workdir=layout.root)
    second = archive_goal(layout, "g1", now=now)
    assert Path(second.destination).name == Path(first.destination).name + "_1"


def test_invalid_id_is_refused(layout):
    """A goal id that is not a safe path segment is refused before any path is built."""
    with pytest.raises(InvalidGoalIdError):
        archive_goal(layout, "../etc", now=utcnow())


def test_unregistered_leftover_can_be_archived(layout):
    """Files of a goal no longer in the registry can be archived."""
    now = utcnow()
    seed_goal(layout, "orphan", now=now, history=1, workdir=layout.root)
    result = archive_goal(layout, "orphan", now=now)
    assert not result.registered and Path(result.destination).is_dir()


def test_cross_filesystem_is_a_clear_error(layout):
    """An archive root on another filesystem is refused unless --copy."""
    other = Path("/dev/shm")
    if not other.is_dir() or os.stat(other).st_dev == os.stat(layout.root).st_dev:
        pytest.skip("needs a second filesystem at /dev/shm")
    now = paused_goal(layout)
    target = other / f"loopx-test-{os.getpid()}"
    try:
        with pytest.raises(CrossDeviceArchiveError):
            archive_goal(layout, "g1", now=now, archive_root=target)
        assert layout.goal_dir("g1").is_dir()
        result = archive_goal(layout, "g1", now=now, archive_root=target, copy=True)
        assert result.copied and (Path(result.destination) / "state.json").exists()
        assert only_policy_left(layout, "g1")
    finally:
        import shutil

        shutil.rmtree(target, ignore_errors=True)


def test_archive_cli_prints_markdown(layout, cli):
    """`loopx archive GOAL` prints a Markdown summary and exits 0."""
    paused_goal(layout)
    proc = cli.run("archive", "g1", check=True)
    assert proc.stdout.startswith("# Archived goal `g1`")


def test_archive_cli_dry_run_json(layout, cli):
    """`loopx archive GOAL --dry-run --json` prints the destination and changes nothing."""
    paused_goal(layout)
    doc = cli.json("archive", "g1", "--dry-run")
    assert doc["dry_run"] is True and "archived-goals/g1-" in doc["destination"]
    assert layout.goal_dir("g1").is_dir()
