"""One turn per workdir: goals sharing a directory (or one inside the other) never overlap."""

from __future__ import annotations

import contextlib
import itertools
import json
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest

from loopx.agents.turn import attempt_turn
from loopx.model import utcnow
from loopx.registry.goalrecords import Goal, HostKind, HostSpec
from loopx.registry.goals import GoalChanges, add_goal
from loopx.turn.fencing import read_epoch
from loopx.turn.lease import claim, release
from loopx.turn.sharedworkdirs import shared_workdirs
from loopx.turn.workdir import acquire_workdir, release_workdir
from loopx.turn.workdirfiles import read_wait
from tests.fleet_helpers import (
    journals,
    kill_everything,
    leftovers,
    start_supervisor,
    supervisor,
    wait_for,
)
from tests.turnkit import cli_env, loopx_here, make_root

pytestmark = pytest.mark.timeout(240)

# Three turns of ~0.4 s each; the third says completed.
HOST = r"""
import json, os, sys, time
envelope = json.load(sys.stdin)
time.sleep(0.4)
kind = "completed" if envelope["seq"] >= 3 else "progress"
json.dump({"kind": kind, "summary": "s"}, open(os.environ["LOOPX_RESULT_FILE"], "w"))
"""


def _goal(layout, goal_id: str, workdir: Path, host: Path) -> None:
    workdir.mkdir(parents=True, exist_ok=True)
    changes = GoalChanges(
        objective="edit the checkout",
        workdir=str(workdir),
        host=HostSpec(kind=HostKind.COMMAND, argv=[sys.executable, str(host)]),
    )
    add_goal(layout, goal_id, changes, update=False, default_workdir=workdir, now=utcnow())


def _spans(root: Path, goal_id: str) -> list[tuple[datetime, datetime, str]]:
    out = []
    for j in journals(root, goal_id):
        assert j["status"] == "committed", j
        out.append(
            (
                datetime.fromisoformat(j["created_at"]),
                datetime.fromisoformat(j["ended_at"]),
                goal_id,
            )
        )
    return out


@pytest.mark.parametrize("nested", [False, True], ids=["same-dir", "one-inside-the-other"])
def test_a_fleet_of_two_never_overlaps_turns_of_one_workdir(tmp_path, nested):
    """Two agents, two goals of one checkout: the goals' turn intervals (journals) are disjoint."""
    root = tmp_path / "root"
    layout = make_root(root)
    host = tmp_path / "host.py"
    host.write_text(HOST)
    repo = tmp_path / "repo"
    _goal(layout, "a", repo, host)
    _goal(layout, "b", repo / "src" if nested else repo, host)
    proc = start_supervisor(root, "--agents", "2", "--until-idle")
    try:
        assert proc.wait(timeout=200) == 0
        assert leftovers(root) == []
    finally:
        kill_everything(root, proc)
    spans = sorted(_spans(root, "a") + _spans(root, "b"))
    assert len(spans) == 6
    for (_s1, end1, g1), (start2, _e2, g2) in itertools.pairwise(spans):
        assert end1 <= start2, f"a turn of {g1} (ends {end1}) overlaps one of {g2} ({start2})"
    assert not list((root / "workdirs").glob("*.json"))  # every hold released


def test_a_goal_on_a_busy_workdir_waits_and_is_woken(tmp_path):
    """Goal b finds a's turn in the workdir: not run, waiting on a; a's release clears it."""
    layout = make_root(tmp_path / "root")
    host = tmp_path / "host.py"
    host.write_text(HOST)
    _goal(layout, "a", tmp_path / "repo", host)
    _goal(layout, "b", tmp_path / "repo", host)
    lease = claim(layout, "a", agent_id="holder", now=utcnow()).lease
    assert lease is not None
    held = acquire_workdir(layout, str(tmp_path / "repo"), lease, now=utcnow(), grace_s=30)
    assert held.hold is not None
    hints = layout.projections_dir / "changes.log"
    before = hints.stat().st_size if hints.exists() else 0
    attempt = attempt_turn(layout, "b", agent_id="other")
    assert (attempt.claimed, attempt.workdir_busy, attempt.report) == (False, "a", None)
    wait = read_wait(layout, "b")
    assert wait is not None
    assert wait.describe() == "workdir busy: goal a runs a turn there"
    assert not (layout.goal_dir("b") / "lease.json").exists()  # b's claim was given back
    status = loopx_here(layout.root, "status", "--json", "--ttl", "0")
    assert status.returncode == 0, status.stderr
    view = next(g for g in json.loads(status.stdout)["goals"] if g["goal_id"] == "b")
    assert view["reason"] == "waiting"
    assert "workdir busy: goal a runs a turn there" in json.dumps(view)
    release_workdir(layout, held.hold)
    release(layout, lease)
    assert read_wait(layout, "b") is None
    status = json.loads(loopx_here(layout.root, "status", "--json", "--ttl", "0").stdout)
    assert next(g for g in status["goals"] if g["goal_id"] == "b")["reason"] == "ready"
    assert hints.stat().st_size > before  # a change hint names b: idle agents wake
    assert "b" in hints.read_text().split()


def test_a_dead_holders_workdir_is_taken_over(tmp_path):
    """A hold whose goal's lease is gone (its agent died) does not block: it is taken over."""
    layout = make_root(tmp_path / "root")
    host = tmp_path / "host.py"
    host.write_text(HOST)
    _goal(layout, "a", tmp_path / "repo", host)
    _goal(layout, "b", tmp_path / "repo", host)
    lease = claim(layout, "a", agent_id="holder", now=utcnow()).lease
    assert lease is not None
    held = acquire_workdir(layout, str(tmp_path / "repo"), lease, now=utcnow(), grace_s=30)
    assert held.hold is not None
    # The holder dies: its lease file names a pid that no longer runs.
    lease_file = layout.goal_dir("a") / "lease.json"
    data = json.loads(lease_file.read_text())
    lease_file.write_text(json.dumps({**data, "pid": 2**22 + 7, "pid_started_at": 1.0}))
    attempt = attempt_turn(layout, "b", agent_id="other")
    assert attempt.claimed
    assert attempt.report is not None
    assert attempt.report.status == "committed"


def test_goal_add_and_import_warn_about_a_shared_workdir(cli, tmp_path):
    """A second goal on one checkout (or inside it) is warned about, on stderr and in --json."""
    repo = tmp_path / "repo"
    (repo / "src").mkdir(parents=True)
    (tmp_path / "repo-other").mkdir()
    base = ["--objective", "o", "--host-kind", "demo"]
    first = loopx_here(cli.root, "goal", "add", "a", "--workdir", str(repo), *base, "--json")
    assert json.loads(first.stdout)["shared_workdir"] == []
    assert first.stderr == ""
    apart = loopx_here(
        cli.root, "goal", "add", "c", "--workdir", str(tmp_path / "repo-other"), *base
    )
    assert "warning" not in apart.stderr  # a sibling whose name starts alike shares nothing
    second = loopx_here(
        cli.root, "goal", "add", "b", "--workdir", str(repo / "src"), *base, "--json"
    )
    assert second.returncode == 0
    assert json.loads(second.stdout)["shared_workdir"] == ["a"]
    assert "warning: goal b shares its workdir with goal(s) a" in second.stderr
    lines = tmp_path / "more.jsonl"
    lines.write_text(json.dumps({"id": "d", "objective": "o", "workdir": str(repo)}) + "\n")
    imported = loopx_here(cli.root, "goal", "import", str(lines), "--json")
    assert imported.returncode == 0, imported.stderr
    assert json.loads(imported.stdout)["shared_workdir"] == {"d": ["a", "b"]}
    assert "warning: goal d shares its workdir with goal(s) a, b" in imported.stderr


def _registered(goal_id: str, workdir: str) -> Goal:
    now = utcnow()
    return Goal(
        id=goal_id,
        objective="o",
        workdir=workdir,
        host=HostSpec(kind=HostKind.DEMO),
        created_at=now,
        updated_at=now,
    )


def test_shared_workdirs_name_overlaps_only_and_at_most_ten_a_goal():
    """Same folder, inside, above: named; a sibling prefix is not; 5,000 in one folder cost 10 ids each."""
    goals = [
        _registered("a", "/w/a"),
        _registered("b", "/w/a/b"),
        _registered("c", "/w/ab"),
        _registered("r", "/w"),
    ]
    assert shared_workdirs(goals, []) == {
        "a": ["b", "r"],
        "b": ["a", "r"],
        "c": ["r"],
        "r": ["a", "b", "c"],
    }
    crowd = [_registered(f"g{i:04}", "/one") for i in range(5000)]
    shared = shared_workdirs(crowd, [])
    assert len(shared) == 5000
    assert {len(ids) for ids in shared.values()} == {10}
    assert shared["g0000"] == [f"g{i:04}" for i in range(1, 11)]


# One turn: waits until the file ``argv[1]`` exists (at most 60 s; "-": none), then completes.
HELD_HOST = r"""
import json, os, sys, time
deadline = time.monotonic() + 60
while sys.argv[1] != "-" and not os.path.exists(sys.argv[1]) and time.monotonic() < deadline:
    time.sleep(0.05)
json.dump({"kind": "completed", "summary": "s"}, open(os.environ["LOOPX_RESULT_FILE"], "w"))
"""
WAITED_S = 5.0  # how long b is watched while a's turn holds the workdir


def test_a_goal_waiting_on_a_busy_workdir_is_woken_by_the_release_not_claimed_meanwhile(
    tmp_path: Path,
) -> None:
    """Goal a's turn holds the workdir (5 s watched): the agent passes goal b over without
    claiming it (b's epoch stays 0), and runs b's turn once a's turn released the workdir."""
    root, repo, release = tmp_path / "root", tmp_path / "repo", tmp_path / "release"
    layout = make_root(root)
    host = tmp_path / "host.py"
    host.write_text(HELD_HOST)
    repo.mkdir()
    for goal_id, until in (("a", str(release)), ("b", "-")):
        changes = GoalChanges(
            objective="edit the checkout",
            workdir=str(repo),
            host=HostSpec(kind=HostKind.COMMAND, argv=[sys.executable, str(host), until]),
        )
        add_goal(layout, goal_id, changes, update=False, default_workdir=repo, now=utcnow())
    holder = subprocess.Popen(
        [sys.executable, "-m", "loopx", "--root", str(root), "turn", "run-once", "a"],
        env=cli_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for("a's turn to hold the workdir", lambda: _holder_of(root) == "a", timeout=60)
        with supervisor(root, agents=1):
            wait_for("b to wait for the workdir", lambda: read_wait(layout, "b"), timeout=60)
            epochs: set[int] = set()
            until = time.monotonic() + WAITED_S

            def watched() -> bool:
                epochs.add(read_epoch(layout, "b"))
                return time.monotonic() > until

            wait_for("b watched while it waits", watched, timeout=60, every=0.1)
            assert _holder_of(root) == "a"
            assert epochs == {0}  # passed over while a's turn held the workdir: never claimed
            release.touch()
            assert holder.wait(timeout=120) == 0
            wait_for("b's turn", lambda: _committed(root, "b"), timeout=60)
    finally:
        release.touch()
        if holder.poll() is None:
            holder.kill()
        holder.wait()
    assert read_epoch(layout, "b") == 1  # claimed once: for the turn it ran
    ((_a_start, a_end, _),) = _spans(root, "a")
    ((b_start, _b_end, _),) = _spans(root, "b")
    assert a_end <= b_start
    assert read_wait(layout, "b") is None


def _holder_of(root: Path) -> str | None:
    """The goal whose turn holds the (one) workdir now."""
    for path in (root / "workdirs").glob("*.json"):
        with contextlib.suppress(FileNotFoundError, ValueError):
            return str(json.loads(path.read_text())["goal_id"])
    return None


def _committed(root: Path, goal_id: str) -> bool:
    return any(j["status"] == "committed" for j in journals(root, goal_id))
