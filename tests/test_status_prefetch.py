"""The forked fingerprint prefetch of a cold `loopx status --json`, on real files and processes."""

from __future__ import annotations

import json
import re
import time

import psutil
import pytest

from loopx.api import Root, prefetch_status_scan
from loopx.model import utcnow
from loopx.registry.goals import open_gate
from loopx.root import Layout
from loopx.status.cache import StatusCache
from loopx.status.database import StatusStore
from loopx.status.fingerprint import goal_fingerprint
from loopx.status.prefetch import Prefetch, start
from loopx.testing.status_fixtures import make_goal, register_goals, seed_goal

pytestmark = pytest.mark.usefixtures("forkable")  # every test here forks, or must


def seeded(layout, n: int = 6):
    """Goals that ran (history) and goals that never ran."""
    now = utcnow()
    ran = [seed_goal(layout, f"ran{i}", now=now, history=2, workdir=layout.root) for i in range(n)]
    fresh = [make_goal(f"new{i}", now=now, workdir=layout.root) for i in range(n)]
    register_goals(layout, [*ran, *fresh])
    for goal in fresh:
        (layout.goals_dir / goal.id).mkdir(parents=True, exist_ok=True)
    return [g.id for g in [*ran, *fresh]]


def started(goals_dir) -> Prefetch:
    prefetch = start(str(goals_dir))
    assert prefetch is not None  # the forkable fixture saw no other thread
    return prefetch


def test_the_child_fingerprints_every_goal_as_the_refresh_would(layout):
    ids = seeded(layout)
    taken = started(layout.goals_dir).fingerprints()
    assert taken == {g: goal_fingerprint(f"{layout.goals_dir}/{g}") for g in ids}
    assert any(fp != taken["new0"] for fp in taken.values())  # the two kinds differ


def test_a_failed_child_answers_none_and_the_refresh_fingerprints_itself(layout):
    seeded(layout)
    missing = started(layout.root / "no-such-dir")
    assert missing.fingerprints() is None
    assert missing.fingerprints() is None  # read once: a later refresh takes its own
    cache = StatusCache(layout, prefetch=started(layout.root / "no-such-dir"))
    report = cache.refresh(now=utcnow(), ttl_s=0)
    assert report.reread == 12
    assert cache.prefetch is None
    assert {g: c.fingerprint for g, c in cache.goals.items()} == {
        g: goal_fingerprint(f"{layout.goals_dir}/{g}") for g in cache.goals
    }


def test_closing_an_unread_prefetch_stops_and_reaps_the_child(layout):
    seeded(layout)
    prefetch = started(layout.goals_dir)
    pid = prefetch.pid
    assert pid is not None
    prefetch.close()
    prefetch.close()  # idempotent
    assert prefetch.pid is None
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_a_change_hinted_after_the_prefetch_is_shown(layout):
    """A fingerprint taken early is like a remembered one: a hinted goal is fingerprinted afresh."""
    seeded(layout)
    status = Root.open(layout.root).status
    status.document()  # a database: the next refresh compares fingerprints with its rows
    taken = started(layout.goals_dir)
    child = psutil.Process(taken.pid)
    deadline = time.monotonic() + 30
    while child.status() != psutil.STATUS_ZOMBIE:  # its answer is in the pipe: it scanned
        assert time.monotonic() < deadline, "the prefetch child did not finish"
        time.sleep(0.01)
    open_gate(layout, "new3", "ship it?", now=utcnow())  # state.json, and a hint
    document = status.document(ttl_s=0, full_scan_after_s=0, prefetch=taken)
    (view,) = (v for v in json.loads(document)["goals"] if v["goal_id"] == "new3")
    assert view["gate_question"] == "ship it?"
    assert taken.pid is None  # the refresh read it


def _instants_masked(document: str) -> str:
    return re.sub(r'"\d{4}-\d\d-\d\dT[^"]*"', '"<instant>"', document)


def test_the_cli_with_a_prefetch_prints_and_stores_what_the_library_does(cli):
    for i in range(5):
        cli.run("goal", "add", f"g{i}", "--objective", "x", check=True)
    cli.run("gate", "open", "g1", "--question", "why?", check=True)
    printed = cli.run("status", "--json", "--clear-cache", check=True).stdout
    stored = StatusStore(Layout.at(cli.root)).load()
    assert stored is not None
    assert {g: c.fingerprint for g, c in stored.goals.items()} == {
        g: goal_fingerprint(f"{cli.root}/goals/{g}") for g in stored.goals
    }
    library = Root.open(cli.root).status
    library.clear_cache()
    assert _instants_masked(printed) == _instants_masked(library.document().decode())
    assert '"gate_question": "why?"' in printed


def test_a_young_cache_is_refreshed_without_a_child(layout):
    seeded(layout)
    root = str(layout.root)
    scan = {"full_scan_after_s": 0.0, "clear_cache": False}
    first = prefetch_status_scan(root, ttl_s=5, **scan)  # no database yet: a full scan is due
    assert first is not None
    first.close()
    Root.open(layout.root).status.document()
    assert prefetch_status_scan(root, ttl_s=300, **scan) is None  # younger than its TTL
    assert prefetch_status_scan(root, ttl_s=300, full_scan_after_s=60.0, clear_cache=False) is None
    cleared = prefetch_status_scan(root, ttl_s=300, full_scan_after_s=0.0, clear_cache=True)
    assert cleared is not None
    assert cleared.fingerprints() is not None
