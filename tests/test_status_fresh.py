"""`loopx status` shows every write made before it on this machine, at once.

Each test warms the status memo first (a `status --json` inside the default
5 s TTL), then writes through the CLI and asks again at once: the answer must
show the write, whatever the TTL.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from loopx.api import Root
from tests.turnkit import demo_goal, loopx, make_root


def status(root: Path) -> dict[str, Any]:
    done = loopx(root, "status", "--json")
    assert done.returncode == 0, done.stderr
    document: dict[str, Any] = json.loads(done.stdout)
    return document


def reason(root: Path, goal_id: str) -> str:
    (view,) = [g for g in status(root)["goals"] if g["goal_id"] == goal_id]
    return str(view["reason"])


def warmed(tmp_path: Path) -> Path:
    """A root with goal g, its status printed twice (the second from the memo)."""
    layout = make_root(tmp_path / "root")
    demo_goal(layout, "g", tmp_path / "wd")
    assert reason(layout.root, "g") == "ready"
    assert reason(layout.root, "g") == "ready"
    return layout.root


def test_gate_open_then_status_shows_the_gate(tmp_path: Path) -> None:
    """`gate open` followed at once by `status --json` shows the gate."""
    root = warmed(tmp_path)
    assert loopx(root, "gate", "open", "g", "--question", "ship?").returncode == 0
    assert reason(root, "g") == "gate_pending"


def test_gate_resolve_then_status_shows_it_ready(tmp_path: Path) -> None:
    """`gate resolve` followed at once by `status --json` shows the goal ready again."""
    root = warmed(tmp_path)
    assert loopx(root, "gate", "open", "g", "--question", "ship?").returncode == 0
    assert reason(root, "g") == "gate_pending"
    assert loopx(root, "gate", "resolve", "g", "--answer", "yes").returncode == 0
    assert reason(root, "g") == "ready"


def test_goal_pause_then_status_shows_it_paused(tmp_path: Path) -> None:
    """`goal pause` followed at once by `status --json` shows the pause, and resume undoes it."""
    root = warmed(tmp_path)
    assert loopx(root, "goal", "pause", "g").returncode == 0
    assert reason(root, "g") == "paused"
    assert loopx(root, "goal", "resume", "g").returncode == 0
    assert reason(root, "g") == "ready"


def test_a_finished_fleet_shows_at_once(tmp_path: Path) -> None:
    """After `supervisor run --until-idle` ends with the goal done, status says done."""
    root = warmed(tmp_path)
    done = loopx(root, "supervisor", "run", "--agents", "1", "--until-idle", timeout=120)
    assert done.returncode == 0, done.stderr
    assert reason(root, "g") == "done"


def test_the_api_shows_a_write_inside_the_ttl(tmp_path: Path) -> None:
    """`root.status.project()` inside its TTL re-reads the hinted goal."""
    root = warmed(tmp_path)
    api = Root.open(root)
    assert api.status.project(ttl_s=300).goals[0].reason == "ready"
    api.goals.pause("g")
    assert api.status.project(ttl_s=300).goals[0].reason == "paused"
