"""The goal index file (``projections/goals.json``): compact entries, shared shapes, rebuilt when old."""

from __future__ import annotations

import json
import os
import shutil
from datetime import timedelta, timezone
from pathlib import Path

import pytest
from pydantic import ValidationError
from structlog.testing import capture_logs

from loopx.model import utcnow
from loopx.registry.catalog import GoalCatalog
from loopx.registry.goal_index import GoalIndex
from loopx.registry.goalrecords import Goal
from loopx.root import Layout
from loopx.status.current import status_document
from loopx.testing.status_fixtures import make_goal, register_goals

SHARED_HOST = {"kind": "command", "argv": ["sh", "-c", "echo 'hi there'"]}
SHARED_QUOTA = {
    "compute": 0.5,
    "window_hours": 2.5,
    "cpu_seconds": 30.0,
    "turn_timeout_s": 90.0,
    "max_rss_mb": 512,
    "min_free_memory_mb": 64,
    "max_load_per_cpu": 1.5,
    "max_tokens": 1000,
    "max_cost_usd": 1.25,
}


def varied_goals(layout: Layout) -> list[Goal]:
    """Goals whose every field differs from its default somewhere, some sharing host and quota."""
    now = utcnow()
    work = layout.root
    return [
        make_goal("plain", now=now, workdir=work),
        make_goal(
            "busy",
            now=now,
            workdir=work,
            host=SHARED_HOST,
            quota=SHARED_QUOTA,
            resources={"gpu": 1.0, "mem-gb": 0.5},
            next_probe="test -f done",
            priority=5,
            status="paused",
            max_host_attempts=3,
            updated_at=now + timedelta(seconds=7, microseconds=3),
        ),
        make_goal(
            "busy.twin",
            now=now,
            workdir=work / "elsewhere",
            host=SHARED_HOST,
            quota=SHARED_QUOTA,
            resources={"gpu": 1.0, "mem-gb": 0.5},
            objective="the same policy, its own objective ✓",
            priority=-2,
            status="done",
            max_host_attempts=3,
        ),
        make_goal(
            "reordered",
            now=now,
            workdir=work,
            host=SHARED_HOST,
            resources={"mem-gb": 0.5, "gpu": 1.0},  # same content, another order: kept as is
        ),
        make_goal(
            "codex",
            now=now.replace(microsecond=0).astimezone(timezone(timedelta(hours=2))),
            workdir=work,
            host={
                "kind": "codex",
                "argv": ["--model", "m"],
                "session_max_turns": 4,
                "unreachable_after_s": 30.5,
            },
            quota={"compute": 0.0},
            status="archived",
        ),
    ]


def fresh_catalog(layout: Layout) -> GoalCatalog:
    """A catalog as a new process has it, loaded from the index file only."""
    catalog = GoalCatalog(layout)
    assert catalog.refresh(now=utcnow(), verify=False) == set()  # nothing read from goal files
    return catalog


def test_a_compact_index_round_trips_goals_exactly(layout: Layout) -> None:
    """Goals loaded from the index equal, dump and count as set like their validated goal files."""
    register_goals(layout, varied_goals(layout))
    GoalCatalog(layout).refresh(now=utcnow())  # reads the goal files, writes the index

    loaded = fresh_catalog(layout)

    assert sorted(loaded.goals) == ["busy", "busy.twin", "codex", "plain", "reordered"]
    for goal_id, goal in loaded.goals.items():
        from_file = Goal.model_validate_json(layout.goal_file(goal_id).read_bytes())
        assert goal == from_file
        assert goal.model_dump_json() == from_file.model_dump_json()
        assert repr(goal) == repr(from_file)
        assert goal.model_fields_set == from_file.model_fields_set
        assert goal.created_at.tzinfo is from_file.created_at.tzinfo
        with pytest.raises(ValidationError):
            goal.priority = 1  # type: ignore[misc]
    # Five goals, four distinct shapes: the twins share one.
    index = GoalIndex.model_validate_json(layout.goal_index_file.read_bytes())
    assert len(index.shapes) == 4


def test_an_index_of_the_previous_schema_version_is_rebuilt(layout: Layout) -> None:
    """A schema_version 1 index is not trusted, even with current fingerprints: read the files."""
    now = utcnow()
    register_goals(layout, [make_goal(g, now=now, workdir=layout.root) for g in ("a", "b")])
    GoalCatalog(layout).refresh(now=now)
    current = json.loads(layout.goal_index_file.read_text())
    stale = make_goal("a", now=now, workdir=layout.root, objective="stale policy")
    old = {
        "schema_version": 1,
        **{k: current[k] for k in ("hint_inode", "hint_offset", "goals_dir_fp", "verified_at")},
        "goals": {
            g: {"fp": entry[:3], "goal": stale.model_copy(update={"id": g}).model_dump(mode="json")}
            for g, entry in current["goals"].items()
        },
    }
    layout.goal_index_file.write_text(json.dumps(old))

    with capture_logs() as logs:
        catalog = GoalCatalog(layout)
        assert catalog.refresh(now=now) == {"a", "b"}  # both read from their goal files

    assert {g.objective for g in catalog.goals.values()} == {"objective of a", "objective of b"}
    assert [(e["event"], e["log_level"], e["schema_version"]) for e in logs] == [
        ("goal_index_rebuilt", "info", 1)
    ]
    assert json.loads(layout.goal_index_file.read_text())["schema_version"] == 2
    assert fresh_catalog(layout).goals == catalog.goals


@pytest.mark.parametrize(
    ("damage", "problem"),
    [
        (lambda e: [*e[:3], 9, *e[4:]], "shape 9 is not in the index"),  # a shape the index lacks
        (lambda e: [*e[:6], "2026-01-01T00:00:00", *e[7:]], "no timezone"),
        (lambda e: [*e[:5], "relative/dir", *e[6:]], "String should match pattern"),
    ],
)
def test_a_damaged_entry_makes_the_index_rebuilt(
    layout: Layout, damage: object, problem: str
) -> None:
    """An entry naming a missing shape or holding a bad value: warned about, then rebuilt."""
    now = utcnow()
    register_goals(layout, [make_goal(g, now=now, workdir=layout.root) for g in ("a", "b")])
    GoalCatalog(layout).refresh(now=now)
    index = json.loads(layout.goal_index_file.read_text())
    index["goals"]["b"] = damage(index["goals"]["b"])  # type: ignore[operator]
    layout.goal_index_file.write_text(json.dumps(index))

    with capture_logs() as logs:
        catalog = GoalCatalog(layout)
        assert catalog.refresh(now=now) == {"a", "b"}

    assert [(e["event"], e["log_level"]) for e in logs] == [("goal_index_unreadable", "warning")]
    assert problem in logs[0]["error"]
    assert sorted(catalog.goals) == ["a", "b"]
    assert fresh_catalog(layout).goals == catalog.goals


def test_a_save_keeps_only_the_shapes_still_used(layout: Layout) -> None:
    """A goal moving to another goal's shape drops its old one; the entries are renumbered."""
    now = utcnow()
    goals = [make_goal(g, now=now, workdir=layout.root) for g in ("a", "b")]
    goals.append(make_goal("c", now=now, workdir=layout.root, host=SHARED_HOST))
    register_goals(layout, goals)
    GoalCatalog(layout).refresh(now=now)
    before = json.loads(layout.goal_index_file.read_text())
    assert len(before["shapes"]) == 2

    catalog = fresh_catalog(layout)
    register_goals(layout, [goals[2].model_copy(update={"host": goals[0].host, "priority": 3})])
    assert catalog.refresh(now=now) == {"c"}

    after = json.loads(layout.goal_index_file.read_text())
    assert len(after["shapes"]) == 1
    assert {g: e[3] for g, e in after["goals"].items()} == {"a": 0, "b": 0, "c": 0}
    reloaded = fresh_catalog(layout)
    assert reloaded.goals == catalog.goals
    assert reloaded.goals["c"].priority == 3
    assert reloaded.goals["c"].host == reloaded.goals["a"].host


def goals_on_disk(layout: Layout) -> dict[str, Goal]:
    """Every goal as its goal file holds it."""
    return {
        d.name: Goal.model_validate_json(layout.goal_file(d.name).read_bytes())
        for d in layout.goals_dir.iterdir()
    }


def test_a_catalog_that_built_no_goal_answers_and_saves_as_a_built_one(layout: Layout) -> None:
    """`goal add`'s path: workdirs in use read from the index, and an index saved, unbuilt.

    A goal added, one changed and one removed since the index was written are
    staged; the workdirs and the saved index are what the goal files give.
    """
    now = utcnow()
    tree = make_goal("tree", now=now, workdir=layout.root, worktree={"base": "main"})
    register_goals(layout, [*varied_goals(layout), tree])
    GoalCatalog(layout).refresh(now=now)
    moved = make_goal("plain", now=now, workdir=layout.root / "moved", host=SHARED_HOST)
    register_goals(layout, [make_goal("new", now=now, workdir=layout.root / "new"), moved])
    shutil.rmtree(layout.goal_dir("reordered"))

    catalog = GoalCatalog(layout)
    assert catalog.refresh(now=now) == {"new", "plain", "reordered"}
    in_use = catalog.own_workdirs()  # before any goal is built

    on_disk = goals_on_disk(layout)
    assert sorted(in_use) == sorted(
        (g.workdir, g.id) for g in on_disk.values() if g.status != "archived" and g.worktree is None
    )
    assert {g for _, g in in_use} == {"busy", "busy.twin", "new", "plain"}
    assert fresh_catalog(layout).goals == on_disk  # the index it saved
    assert catalog.goals == on_disk  # built now, with what it staged
    assert sorted(catalog.own_workdirs()) == sorted(in_use)


def test_a_copied_root_is_reindexed_once_by_a_cold_status(layout: Layout, tmp_path: Path) -> None:
    """A copy has new inodes: the first full scan re-reads the goal files and saves what it saw.

    The status cache's full scan hands the moved goals to ``reread``; before it
    saved, every later cold status of the copy re-read every goal file again.
    """
    now = utcnow()
    register_goals(layout, [make_goal(g, now=now, workdir=layout.root) for g in ("a", "b", "c")])
    GoalCatalog(layout).refresh(now=now)
    copy = tmp_path / "copy"
    shutil.copytree(layout.root, copy)  # new inodes: the index's fingerprints are the original's
    copied = Layout.at(copy)

    status_document(copied, now=now, full_scan_after_s=0)

    saved = json.loads(copied.goal_index_file.read_text())["goals"]
    for goal_id in ("a", "b", "c"):
        st = os.stat(copied.goal_file(goal_id))
        assert saved[goal_id][:3] == [st.st_ino, st.st_mtime_ns, st.st_size]
    assert fresh_catalog(copied).moved({g: tuple(saved[g][:3]) for g in ("a", "b", "c")}) == []
