"""The registry as one file per goal: O(1) writes, a derived goal index, migration of old roots."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loopx.faults import FAULT_EXIT_CODE
from loopx.model import utcnow
from loopx.registry.catalog import GoalCatalog, load_registry
from loopx.registry.migrate import RegistryV1
from loopx.root import Layout
from loopx.testing.status_fixtures import make_goal, register_goals
from tests.conftest import Cli


@pytest.fixture
def cli(cli: Cli) -> Cli:
    """What commands print and decide is the point here: the CLI runs in this process."""
    return cli.in_process()


MIGRATION_FAULTS = (
    "migrate:start",
    "migrate:backup_written",
    "migrate:goal_written",
    "migrate:goals_written",
    "migrate:committed",
)


def old_root(root: Path, ids: list[str]) -> dict[str, dict[str, object]]:
    """Write a root as LoopX 0.x did: one registry.json holding every goal."""
    root.mkdir(mode=0o700, exist_ok=True)
    now = utcnow()
    goals = {g: make_goal(g, now=now, workdir=root, priority=i) for i, g in enumerate(ids)}
    (root / "registry.json").write_text(RegistryV1(goals=goals).model_dump_json())
    return {g: goal.model_dump(mode="json") for g, goal in goals.items()}


def test_goal_add_writes_only_that_goals_file(cli: Cli) -> None:
    """Adding a goal leaves registry.json byte for byte and writes goals/<id>/goal.json."""
    cli.run("init", check=True)
    settings = (cli.root / "registry.json").read_bytes()
    cli.run("goal", "add", "a", "--objective", "x", check=True)
    cli.run("goal", "add", "b", "--objective", "y", check=True)
    cli.run("goal", "pause", "a", check=True)
    assert (cli.root / "registry.json").read_bytes() == settings
    policy = json.loads((cli.root / "goals" / "a" / "goal.json").read_text())
    assert (policy["id"], policy["status"]) == ("a", "paused")
    assert [g["id"] for g in cli.json("goal", "list")["goals"]] == ["a", "b"]


def test_goal_index_is_rebuilt_when_missing_or_damaged(cli: Cli) -> None:
    """`goal list` answers from the goal files when projections/goals.json is gone or garbage."""
    cli = Cli(cli.root, cli.cwd)  # fresh processes: one process keeps its catalog in memory
    for g in ("a", "b", "c"):
        cli.run("goal", "add", g, "--objective", g, check=True)
    index = cli.root / "projections" / "goals.json"
    cli.run("goal", "list", check=True)
    assert sorted(json.loads(index.read_text())["goals"]) == ["a", "b", "c"]
    for damage in (None, b"{torn", b'{"schema_version": 1}'):
        if damage is None:
            index.unlink()
        else:
            index.write_bytes(damage)
        assert [g["id"] for g in cli.json("goal", "list")["goals"]] == ["a", "b", "c"]
        assert sorted(json.loads(index.read_text())["goals"]) == ["a", "b", "c"]


def test_a_stale_index_is_caught_by_hints_and_by_verification(layout: Layout) -> None:
    """A goal file changed behind the index shows up: by its hint, else by the periodic stat."""
    now = utcnow()
    register_goals(layout, [make_goal(g, now=now, workdir=layout.root) for g in ("a", "b")])
    first = GoalCatalog(layout)
    first.refresh(now=now)
    assert first.goals["a"].priority == 0
    # Changed without a hint (as a crash between the write and the hint would leave it).
    changed = first.goals["a"].model_copy(update={"priority": 7})
    layout.goal_file("a").write_text(changed.model_dump_json())
    second = GoalCatalog(layout)
    assert second.refresh(now=now) == set()  # the index is trusted until verification is due
    assert "a" in second.refresh(now=now, verify_after_s=0)
    assert second.goals["a"].priority == 7
    # A write through the library leaves a hint: seen at once.
    register_goals(layout, [changed.model_copy(update={"priority": 9})])
    assert "a" in second.refresh(now=now)
    assert second.goals["a"].priority == 9


def test_concurrent_writers_of_different_goals_do_not_share_a_lock(layout: Layout) -> None:
    """Each goal's writes lock only that goal's file; registry.json is never locked by them."""
    now = utcnow()
    register_goals(layout, [make_goal("a", now=now, workdir=layout.root)])
    assert (layout.goal_dir("a") / "goal.json.lock").exists()
    assert not Path(str(layout.registry) + ".lock").exists()


@pytest.mark.parametrize("fault", MIGRATION_FAULTS)
def test_migration_survives_a_kill_at_every_step(cli: Cli, fault: str) -> None:
    """Killed at any step of the migration, the next open finishes it: nothing lost or doubled."""
    before = old_root(cli.root, ["g1", "g2", "g3"])
    killed = cli.run("goal", "list", LOOPX_FAULT=fault)
    assert killed.returncode == FAULT_EXIT_CODE, killed.stderr
    listed = cli.json("goal", "list")["goals"]
    assert {g["id"]: g for g in listed} == before
    assert json.loads((cli.root / "registry.json").read_text()) == {
        "schema_version": 2,
        "common_runtime_root": None,
        "sandbox": None,
    }
    for goal_id, policy in before.items():
        assert json.loads((cli.root / "goals" / goal_id / "goal.json").read_text()) == policy
    backup = json.loads((cli.root / "registry.v1.json").read_text())
    assert set(backup["goals"]) == set(before)


def test_init_upgrade_reports_the_migration(cli: Cli) -> None:
    """`loopx init --upgrade` migrates an old root and says how many goals moved; again: none."""
    old_root(cli.root, ["a", "b"])
    first = cli.json("init", "--upgrade")
    assert (first["migration"]["goals"], first["goals"]) == (2, 2)
    assert cli.json("init", "--upgrade")["migration"]["goals"] == 0


def test_a_root_from_a_newer_loopx_is_refused(cli: Cli) -> None:
    """A registry with a higher schema_version is refused with a clear line and left alone."""
    cli.root.mkdir(mode=0o700, exist_ok=True)
    registry = cli.root / "registry.json"
    registry.write_text('{"schema_version": 3}')
    proc = cli.run("goal", "list")
    assert proc.returncode == 1
    assert "newer" in proc.stderr and "hint: upgrade LoopX" in proc.stderr
    assert registry.read_text() == '{"schema_version": 3}'


def test_library_readers_migrate_too(layout: Layout) -> None:
    """load_registry on an old root migrates it first (under the registry lock)."""
    now = utcnow()
    goal = make_goal("a", now=now, workdir=layout.root)
    layout.registry.write_text(RegistryV1(goals={"a": goal}).model_dump_json())
    assert load_registry(layout).goals == {"a": goal}
