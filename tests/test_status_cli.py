"""`loopx status` and `loopx refresh` as real subprocesses."""

from __future__ import annotations

import re
import subprocess
import sys
import time

from loopx.api import Root
from loopx.model import utcnow
from loopx.root import Layout
from loopx.status.database import StatusStore
from loopx.status.fingerprint import goal_fingerprint
from loopx.testing.status_fixtures import open_gate_state, register_goals, seed_goal, write_state


def seed(layout):
    now = utcnow()
    goals = [seed_goal(layout, gid, now=now, history=2, workdir=layout.root) for gid in ("a", "b")]
    register_goals(layout, goals)
    write_state(layout, open_gate_state("b", "Deploy on Friday?", now=now))


def test_status_json_is_the_documented_document(layout, cli):
    """`status --json` prints the projection: schema_version, counts, fleet, ordered goals."""
    seed(layout)
    doc = cli.json("status")
    assert doc["schema_version"] == 1
    assert [g["goal_id"] for g in doc["goals"]] == ["b", "a"]
    assert (doc["goals"][0]["actor"], doc["goals"][0]["reason"]) == ("human", "gate_pending")
    assert doc["counts"]["by_actor"] == {"agent": 1, "human": 1, "none": 0}
    assert set(doc) == {
        "schema_version",
        "generated_at",
        "checked_at",
        "counts",
        "fleet",
        "quarantined_total",
        "accounts",
        "goals",
    }


def test_status_plain_text_when_not_a_tty(layout, cli):
    """Without a TTY, status prints one line per goal, human first."""
    seed(layout)
    out = cli.run("status", check=True).stdout.splitlines()
    assert out[0].startswith("2 goals: 1 need a human")
    assert out[1].split()[:3] == ["actor", "goal", "reason"]  # a header row, aligned
    assert out[2].split()[:3] == ["human", "b", "gate_pending"]
    assert out[2].index("gate_pending") == out[1].index("reason")


def test_status_actor_filter(layout, cli):
    """--actor human lists only the goals a human must act on."""
    seed(layout)
    doc = cli.json("status", "--actor", "human")
    assert [g["goal_id"] for g in doc["goals"]] == ["b"]


def test_refresh_json_reports_the_work(layout, cli):
    """`refresh --full --json` says how many goals it checked and re-read."""
    seed(layout)
    doc = cli.json("refresh", "--full")
    assert (doc["full_scan"], doc["goals"], doc["reread"]) == (True, 2, 2)


def test_clear_cache_then_status(layout, cli):
    """`status --clear-cache` rebuilds the projection from scratch."""
    seed(layout)
    cli.run("status", check=True)
    doc = cli.json("status", "--clear-cache")
    assert doc["counts"]["total"] == 2


def _instants_masked(document: str) -> str:
    return re.sub(r'"\d{4}-\d\d-\d\dT[^"]*"', '"<instant>"', document)


def test_a_cold_status_json_prints_and_stores_what_the_library_does(cli):
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


def test_watch_redraws_until_interrupted(layout, cli):
    """`status --watch` prints the queue again and again; SIGINT ends it with exit 0."""
    seed(layout)
    proc = subprocess.Popen(
        [sys.executable, "-m", "loopx", "--root", str(cli.root), "status", "--watch", "0.2"],
        stdout=subprocess.PIPE,
        text=True,
        env=cli.env(),
    )
    try:
        headers = 0
        deadline = time.monotonic() + 30
        assert proc.stdout is not None
        while headers < 2 and time.monotonic() < deadline:
            line = proc.stdout.readline()
            headers += line.startswith("2 goals:")
        assert headers == 2
        proc.send_signal(2)
        assert proc.wait(timeout=20) == 0
    finally:
        proc.kill()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
