"""A rebuilt status database written by a forked child while the document is assembled.

Real forks, real SQLite files, the real CLI; the fault point kills the child
before its commit, as a SIGKILL would.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from loopx.api import Root, print_status_snapshot
from loopx.root import Layout
from loopx.status import cache as cache_module
from loopx.status.cache import StatusCache
from loopx.status.database import StatusStore
from loopx.testing.status_fixtures import make_goal, register_goals, seed_goal
from tests.fleet_helpers import alive, wait_for

pytestmark = pytest.mark.usefixtures("forkable")  # every test here forks, or must

AT = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def behind_from_two(monkeypatch: pytest.MonkeyPatch) -> None:
    """Write behind from two goals on (5,000 outside the tests), so small roots show it."""
    monkeypatch.setattr(cache_module, "_BEHIND_MIN_GOALS", 2)


def seeded(layout: Layout, n: int = 4) -> list[str]:
    """Goals that ran (history) and goals that never ran."""
    ran = [seed_goal(layout, f"ran{i}", now=AT, history=2, workdir=layout.root) for i in range(n)]
    fresh = [make_goal(f"new{i}", now=AT, workdir=layout.root) for i in range(n)]
    register_goals(layout, [*ran, *fresh])
    return [g.id for g in [*ran, *fresh]]


def rows(layout: Layout) -> dict[str, tuple[object, ...]]:
    """Every stored row, its view bytes included."""
    store = StatusStore(layout)
    loaded = store.load()
    assert loaded is not None
    views = store.views()
    return {
        g: (c.fingerprint, c.history, c.epoch, c.recheck_ts, c.leased, c.probe, views[g])
        for g, c in loaded.goals.items()
    }


def leftovers(layout: Layout) -> list[str]:
    """Files the child's database left beside the store."""
    return [p.name for p in StatusStore(layout).path.parent.iterdir() if ".new" in p.name]


@pytest.mark.usefixtures("behind_from_two")
def test_a_database_written_behind_holds_what_one_written_in_process_does(
    layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = seeded(layout)
    status = Root.open(layout.root).status
    behind = status.document(now=AT)  # no database yet: a rebuild, written by a child
    written_behind = rows(layout)
    assert sorted(written_behind) == sorted(ids)
    assert leftovers(layout) == []

    monkeypatch.setattr(cache_module, "_BEHIND_MIN_GOALS", 10**9)
    status.clear_cache()
    assert status.document(now=AT) == behind
    assert rows(layout) == written_behind


@pytest.mark.usefixtures("behind_from_two")
def test_the_memo_replays_a_document_written_behind(layout: Layout) -> None:
    seeded(layout)
    document = Root.open(layout.root).status.document()
    out = io.BytesIO()
    assert print_status_snapshot(layout.root, ttl_s=300, out=out)
    assert out.getvalue() == document


@pytest.mark.usefixtures("behind_from_two")
def test_a_child_killed_before_its_commit_leaves_no_database_and_no_memo(
    layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The parent's document is whole; the next status rebuilds the database."""
    ids = seeded(layout)
    status = Root.open(layout.root).status
    monkeypatch.setenv("LOOPX_FAULT", "status:rows_written")
    document = status.document(now=AT)
    assert sorted(v["goal_id"] for v in json.loads(document)["goals"]) == sorted(ids)
    assert not StatusStore(layout).path.exists()
    assert leftovers(layout) == []
    assert not print_status_snapshot(layout.root, ttl_s=300, out=io.BytesIO())

    monkeypatch.delenv("LOOPX_FAULT")
    assert status.document(now=AT) == document
    assert sorted(rows(layout)) == sorted(ids)


# A cold status that forks its writer and is SIGKILLed before it moves the database in.
_KILLED_BEFORE_THE_MOVE = """
import os, signal, sys
from pathlib import Path
from datetime import UTC, datetime
import psutil
from loopx.root import Layout
from loopx.status import cache
cache._BEHIND_MIN_GOALS = 2
status = cache.StatusCache(Layout.at(Path(sys.argv[1])), write_behind=True)
status.refresh(now=datetime(2030, 1, 1, 12, 0, tzinfo=UTC), ttl_s=0)
assert status.writing_behind
print(os.getpid(), psutil.Process().children()[0].pid, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_what_a_killed_status_left_goes_with_the_next_rebuild(layout: Layout) -> None:
    """Its writer's ``status.db.<pid>.new`` goes once that pid is gone; a running one's stays."""
    seeded(layout)
    killed = subprocess.run(
        [sys.executable, "-c", _KILLED_BEFORE_THE_MOVE, str(layout.root)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert killed.returncode == -9, killed.stderr
    parent, writer = map(int, killed.stdout.split())
    wait_for("the orphaned writer to finish", lambda: not alive(writer))
    assert leftovers(layout) == [f"status.db.{parent}.new"]  # written, never moved in
    running = StatusStore(layout).path.with_name(f"status.db.{os.getpid()}.new")
    running.write_bytes(b"a status still writing")

    StatusCache(layout).refresh(now=AT, ttl_s=0)  # no database: a rebuild, in this process
    assert leftovers(layout) == [running.name]
    assert StatusStore(layout).path.exists()


@pytest.mark.usefixtures("behind_from_two")
def test_a_database_another_process_wrote_meanwhile_is_kept(layout: Layout) -> None:
    """The child's database is dropped: the other one read the goal files later."""
    seeded(layout)
    first = StatusCache(layout, write_behind=True)
    first.refresh(now=AT, ttl_s=0)
    assert first.writing_behind
    other = StatusCache(layout)
    other.refresh(now=AT, ttl_s=0)  # finds no database: rebuilds it in its own process
    theirs = rows(layout)
    assert not first.finish_write()
    assert rows(layout) == theirs
    assert leftovers(layout) == []
    first.refresh(now=AT, ttl_s=0)  # reloads theirs: nothing is rebuilt again
    assert first.goals.keys() == other.goals.keys()


def test_the_cli_writes_a_large_rebuild_behind(cli, tmp_path: Path) -> None:
    """5,000 goals (the size from which the CLI forks its writer): the warm status replays it."""
    work = tmp_path / "work"
    lines = []
    for i in range(cache_module._BEHIND_MIN_GOALS):
        (work / f"g{i}").mkdir(parents=True)
        lines.append(
            json.dumps({"id": f"g{i:04d}", "objective": "x", "workdir": str(work / f"g{i}")})
        )
    source = tmp_path / "goals.jsonl"
    source.write_text("\n".join(lines) + "\n")
    cli.run("goal", "import", str(source), check=True)
    cold = cli.run("status", "--json", "--clear-cache", check=True).stdout
    layout = Layout.at(cli.root)
    assert len(rows(layout)) == len(lines)
    assert leftovers(layout) == []
    assert len(json.loads(cold)["goals"]) == len(lines)
    assert cli.run("status", "--json", "--ttl", "300", check=True).stdout == cold
