"""Goal fingerprints taken by a forked child while the CLI starts (loopx.status.prefetch)."""

from __future__ import annotations

import json
import time

import pytest

from loopx.api import Root, prefetch_status_scan
from loopx.forked import Forked
from loopx.hints import note_goal_changed
from loopx.model import utcnow
from loopx.status.cache import StatusCache
from loopx.status.fingerprint import goal_fingerprint
from loopx.status.prefetch import Fingerprints, prefetch_fingerprints
from loopx.status.view import StatusReason
from loopx.testing.status_fixtures import (
    make_goal,
    open_gate_state,
    register_goals,
    seed_goal,
    write_state,
)
from tests.childkit import exited, reaped


def seeded(layout) -> None:
    now = utcnow()
    ran = [seed_goal(layout, f"g{i}", now=now, history=2, workdir=layout.root) for i in range(3)]
    unrun = make_goal("fresh", now=now, workdir=layout.root)
    layout.ensure_goal_dirs("fresh")
    register_goals(layout, [*ran, unrun])


def wait_until_written(prefetch: Forked[Fingerprints]) -> None:
    """Until the child has written its answer (a small one fits the pipe) and exited, unreaped."""
    deadline = time.monotonic() + 30
    while not exited(prefetch.pid):
        assert time.monotonic() < deadline, "the prefetch child did not finish"
        time.sleep(0.01)


def test_the_child_fingerprints_every_goal_directory(layout):
    """result() gives each goal directory's fingerprint, as goal_fingerprint reads it; a stray file is skipped."""
    seeded(layout)
    (layout.goals_dir / "stray.tmp").write_text("not a goal")
    prefetch = prefetch_fingerprints(str(layout.goals_dir))
    taken = prefetch.result()
    expected = {d.name: goal_fingerprint(str(d)) for d in layout.goals_dir.iterdir() if d.is_dir()}
    assert taken == expected and set(expected) == {"g0", "g1", "g2", "fresh"}
    assert reaped(prefetch.pid)
    assert prefetch.result() is None  # taken once


def test_close_stops_a_child_nobody_asked(layout):
    """close() without result() kills and reaps the child; a second close() does nothing."""
    seeded(layout)
    prefetch = prefetch_fingerprints(str(layout.goals_dir))
    prefetch.close()
    assert reaped(prefetch.pid)
    prefetch.close()
    assert prefetch.result() is None


def test_a_failed_child_gives_nothing(tmp_path):
    """A child that cannot list the goals exits non-zero: result() is None, the caller scans itself."""
    prefetch = prefetch_fingerprints(str(tmp_path / "missing"))
    assert prefetch.result() is None
    assert reaped(prefetch.pid)


def test_refresh_takes_early_fingerprints_and_reads_what_changed_since(layout):
    """A change after the prefetch is read now, and its goal is read again at the next scan."""
    seeded(layout)
    prefetch = prefetch_fingerprints(str(layout.goals_dir))
    early = goal_fingerprint(str(layout.goals_dir / "g1"))
    wait_until_written(prefetch)
    write_state(layout, open_gate_state("g1", "Ship it?", now=utcnow()))
    cache = StatusCache(layout)
    try:
        cache.refresh(now=utcnow(), ttl_s=0, full_scan_after_s=0, prefetch=prefetch)
    finally:
        prefetch.close()
    assert cache.goals["g1"].view.reason is StatusReason.GATE_PENDING
    assert cache.goals["g1"].fingerprint == list(early)  # the prefetch's, older than the read
    report = cache.refresh(now=utcnow(), ttl_s=0, full_scan_after_s=0)
    assert report.changed == {"g1"}
    assert cache.goals["g1"].fingerprint == list(goal_fingerprint(str(layout.goals_dir / "g1")))


def test_a_hinted_goal_is_fingerprinted_afresh(layout):
    """Early fingerprints are not used for goals a writer hinted: theirs are taken at the refresh."""
    seeded(layout)
    cache = StatusCache(layout)
    cache.refresh(now=utcnow(), ttl_s=0)
    prefetch = prefetch_fingerprints(str(layout.goals_dir))
    wait_until_written(prefetch)
    write_state(layout, open_gate_state("g2", "Merge?", now=utcnow()))
    note_goal_changed(layout, "g2")
    try:
        report = cache.refresh(now=utcnow(), ttl_s=0, full_scan_after_s=0, prefetch=prefetch)
    finally:
        prefetch.close()
    assert report.changed == {"g2"}
    assert cache.goals["g2"].fingerprint == list(goal_fingerprint(str(layout.goals_dir / "g2")))


@pytest.mark.parametrize(
    ("clear", "ttl", "full_after", "started"),
    [
        (True, 5.0, 0.0, True),  # --clear-cache: always a full scan
        (False, 5.0, 0.0, False),  # a cache refreshed just now is served as it is
        (False, 0.0, 0.0, True),  # --ttl 0: a refresh, and every refresh scans
        (False, 0.0, 60.0, False),  # --full-scan-after 60: most refreshes do not scan
    ],
)
def test_prefetch_starts_only_when_a_scan_is_due(layout, clear, ttl, full_after, started):
    """prefetch_status_scan forks only when the coming refresh checks every goal."""
    seeded(layout)
    Root.open(layout.root).status.refresh(full=True)
    prefetch = prefetch_status_scan(
        layout.root, ttl_s=ttl, full_scan_after_s=full_after, clear_cache=clear
    )
    assert (prefetch is not None) is started
    if prefetch is not None:
        prefetch.close()


def test_a_root_without_a_cache_is_prefetched(layout):
    """No index yet: the first status scans everything."""
    seeded(layout)
    prefetch = prefetch_status_scan(layout.root, ttl_s=5.0, full_scan_after_s=0.0)
    assert prefetch is not None
    prefetch.close()


def test_cold_cli_document_equals_the_api_one(layout, cli):
    """`status --json --clear-cache` (with its prefetch) prints what the API assembles without one."""
    seeded(layout)
    printed = cli.json("status", "--clear-cache")
    status = Root.open(layout.root).status
    status.clear_cache()
    assembled = json.loads(status.document(ttl_s=0, full_scan_after_s=0))

    def stable(doc):
        for key in ("generated_at", "checked_at"):
            doc.pop(key)
        for goal in doc["goals"]:
            goal["quota"].pop("window_start")
        return doc

    assert stable(printed) == stable(assembled)
