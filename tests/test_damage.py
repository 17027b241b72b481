"""Damage: truncate or zero random bytes of each durable file; LoopX reports it precisely.

For every file kind (state, a journal, history, quota ledger, registry) and both
kinds of damage: `loopx doctor` names the file, the problem and a repair;
read-only commands change nothing; a turn on the damaged goal ends in a clear
one-line error (or quarantines the journal) and leaves the other goal alone;
following doctor's repair commands brings the root back to healthy.
"""

from __future__ import annotations

import hashlib
import json
import random
import shlex
import shutil
from pathlib import Path
from typing import Any

import pytest

from loopx.agents.turn import run_one_turn
from loopx.root import Layout
from loopx.status.database import store_file
from loopx.turn.journal import journal_files
from tests.turnkit import demo_goal, loopx, loopx_here, make_root

TARGETS = ("state", "journal", "history", "quota", "registry")
MODES = ("truncate", "zero")


def _target(layout: Layout, target: str) -> Path:
    return {
        "state": layout.state_file("g"),
        "journal": journal_files(layout, "g")[-1] if target == "journal" else layout.root,
        "history": layout.history_file("g"),
        "quota": layout.quota_file("g"),
        "registry": layout.goal_file("g"),  # the goal's entry in the registry
    }[target]


def damage(path: Path, mode: str, rng: random.Random) -> None:
    """Truncate inside the last record, or zero a few random bytes."""
    data = bytearray(path.read_bytes())
    if mode == "truncate":
        # Cut somewhere in the last 60% of the file, never only the final newline.
        cut = rng.randrange(len(data) * 2 // 5, len(data) - 2)
        path.write_bytes(bytes(data[:cut]))
    else:
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(0, len(data) - 1)] = 0
        path.write_bytes(bytes(data))


def durable_hashes(layout: Layout, *, skip: Path | None = None) -> dict[str, str]:
    """SHA-256 of every durable file (caches, locks, logs and projections excluded)."""
    out = {}
    for path in sorted(layout.root.rglob("*")):
        rel = path.relative_to(layout.root).as_posix()
        if (
            not path.is_file()
            or path == skip
            or rel.startswith(("projections/", "logs/", "agents/"))
            or path.name.endswith((".lock", ".agg.json"))
        ):
            continue
        out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def doctor(root: Path) -> tuple[int, dict[str, Any]]:
    done = loopx_here(root, "doctor", "--json")
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, json.loads(done.stdout)


def follow_repairs(root: Path, report: dict[str, Any], registry_backup: bytes) -> None:
    """Do what each finding's repair says (the part before its parenthesised comment)."""
    for finding in report["findings"]:
        if finding["severity"] == "info":
            continue
        if finding["path"].endswith("goal.json"):
            Path(finding["path"]).write_bytes(registry_backup)  # "restore it from a backup"
            continue
        words = shlex.split(finding["repair"].split("  (")[0])
        if words[:1] == ["loopx"]:
            done = loopx_here(root, *words[1:])
            assert "Traceback" not in done.stderr, done.stderr
        elif words[:1] == ["rm"]:
            for name in words[1:]:
                Path(name).unlink(missing_ok=True)
        elif words[:1] == ["chmod"]:
            Path(words[2]).chmod(int(words[1], 8))
        else:
            pytest.fail(f"doctor gave a repair this test cannot follow: {finding}")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("target", TARGETS)
def test_damage_is_reported_contained_and_repairable(
    tmp_path: Path, target: str, mode: str
) -> None:
    """A damaged file gets a precise doctor finding, a clear error, and a working repair."""
    rng = random.Random(f"{target}-{mode}")
    layout = make_root(tmp_path / "root")
    for goal_id in ("g", "h"):
        demo_goal(layout, goal_id, tmp_path / f"wd-{goal_id}", "--steps", "5")
        for _ in range(2):
            report = run_one_turn(layout, goal_id, agent_id="setup")
            assert report is not None and report.status == "committed"
    registry_backup = layout.goal_file("g").read_bytes()
    path = _target(layout, target)
    before = durable_hashes(layout, skip=path)

    damage(path, mode, rng)

    # doctor names the damaged file with a repair; read-only commands change nothing.
    code, report = doctor(layout.root)
    assert code == 1
    named = [f for f in report["findings"] if f["path"] == str(path) and f["severity"] == "error"]
    assert named, report["findings"]
    assert all(f["repair"] for f in named)
    verify = loopx_here(layout.root, "replay", "g", "--verify", "--json")
    assert "Traceback" not in verify.stderr, verify.stderr
    if target != "registry":
        assert verify.returncode == 1
    assert durable_hashes(layout, skip=path) == before

    # A turn on the damaged goal (a real process): a clear error or a quarantine, and the other
    # goal untouched. doctor, replay and the repairs run in this process: their output is the point.
    bystander = {k: v for k, v in before.items() if k.startswith("goals/h/")}
    turn = loopx(layout.root, "turn", "run-once", "g", "--json")
    assert "Traceback" not in turn.stderr, turn.stderr
    assert turn.returncode in {0, 1, 3}
    if turn.returncode == 1 and not turn.stdout.strip():
        assert turn.stderr.startswith("loopx: error: ") and "hint: " in turn.stderr
    after = durable_hashes(layout, skip=path)
    assert {k: v for k, v in after.items() if k.startswith("goals/h/")} == bystander

    # Following doctor's repairs makes the root healthy again.
    for _ in range(4):
        code, report = doctor(layout.root)
        if code == 0:
            break
        follow_repairs(layout.root, report, registry_backup)
    assert code == 0, report["findings"]
    assert loopx_here(layout.root, "replay", "h", "--verify").returncode == 0


def test_damaged_journal_is_quarantined_by_recover(tmp_path: Path) -> None:
    """`loopx recover` moves a damaged journal to quarantine/ beside a reason, untouched."""
    layout = make_root(tmp_path / "root")
    demo_goal(layout, "g", tmp_path / "wd", "--steps", "5")
    run_one_turn(layout, "g", agent_id="setup")
    path = journal_files(layout, "g")[0]
    damage(path, "zero", random.Random(1))
    damaged = path.read_bytes()
    done = loopx(layout.root, "recover", "--json")
    assert done.returncode == 1
    moved = Path(json.loads(done.stdout)["quarantined"][0])
    assert moved.read_bytes() == damaged
    assert moved.with_name(moved.name + ".reason.json").exists()
    assert not path.exists()


def test_doctor_healthy_root_exits_zero(tmp_path: Path) -> None:
    """A root after ordinary turns is healthy: exit 0 and no error or warning."""
    layout = make_root(tmp_path / "root")
    demo_goal(layout, "g", tmp_path / "wd")
    run_one_turn(layout, "g", agent_id="setup")
    code, report = doctor(layout.root)
    assert (code, report["healthy"], report["counts"]["error"], report["counts"]["warning"]) == (
        0,
        True,
        0,
        0,
    )


def test_doctor_checks_the_status_database(tmp_path: Path) -> None:
    """A damaged status database is a warning whose repair rebuilds it from the goal files."""
    layout = make_root(tmp_path / "root")
    demo_goal(layout, "g", tmp_path / "wd")
    run_one_turn(layout, "g", agent_id="setup")
    assert loopx_here(layout.root, "status", "--json").returncode == 0
    stored = store_file(layout)
    assert stored.is_file()
    assert doctor(layout.root)[0] == 0
    with stored.open("r+b") as f:
        f.write(b"not sqlite" * 500)
    code, report = doctor(layout.root)
    findings = [f for f in report["findings"] if f["path"] == str(stored)]
    assert code == 1
    assert [(f["code"], f["severity"]) for f in findings] == [("schema", "warning")]
    follow_repairs(layout.root, report, b"")
    assert doctor(layout.root)[0] == 0
    done = loopx_here(layout.root, "status", "--json")
    assert done.returncode == 0 and json.loads(done.stdout)["counts"]["total"] == 1


def test_doctor_reports_stray_temp_and_stale_lease(tmp_path: Path) -> None:
    """A dead writer's temp file and a dead holder's lease are found, with repairs."""
    layout = make_root(tmp_path / "root")
    demo_goal(layout, "g", tmp_path / "wd")
    run_one_turn(layout, "g", agent_id="setup")
    tmp = layout.goal_dir("g") / ".state.json.999999.abcd1234.tmp"
    tmp.write_bytes(b"{")
    tmp.chmod(0o600)
    lease = {
        "schema_version": 1,
        "goal_id": "g",
        "agent_id": "gone",
        "pid": 999_999,
        "pid_started_at": 1.0,
        "hostname": __import__("socket").gethostname(),
        "epoch": 1,
        "turn_key": None,
        "acquired_at": "2020-01-01T00:00:00Z",
        "renewed_at": "2020-01-01T00:00:00Z",
        "expires_at": "2020-01-01T00:00:30Z",
    }
    layout.lease_file("g").write_text(json.dumps(lease))
    layout.lease_file("g").chmod(0o600)
    code, report = doctor(layout.root)
    codes = {(f["code"], f["path"]) for f in report["findings"]}
    assert code == 1
    assert ("stray_temp", str(tmp)) in codes
    assert ("stale_lease", str(layout.lease_file("g"))) in codes
    follow_repairs(layout.root, report, b"")
    assert doctor(layout.root)[0] == 0


def test_doctor_reports_broad_permissions(tmp_path: Path) -> None:
    """A file readable by others and a group-writable directory are reported with chmod."""
    layout = make_root(tmp_path / "root")
    demo_goal(layout, "g", tmp_path / "wd")
    layout.state_file("g").chmod(0o644)
    layout.goal_dir("g").chmod(0o770)
    _code, report = doctor(layout.root)
    by_path = {f["path"]: f for f in report["findings"] if f["code"] == "permissions"}
    assert by_path[str(layout.state_file("g"))]["repair"].startswith("chmod 600 ")
    assert by_path[str(layout.goal_dir("g"))]["severity"] == "error"
    follow_repairs(layout.root, report, b"")
    assert doctor(layout.root)[0] == 0


def test_doctor_on_a_dead_supervisor_record(tmp_path: Path) -> None:
    """supervisor.json saying running with a dead pid is a warning with a restart command."""
    layout = make_root(tmp_path / "root")
    record = {
        "schema_version": 1,
        "pid": 999_999,
        "pid_started_at": 1.0,
        "hostname": "h",
        "agents_wanted": 3,
        "state": "running",
        "started_at": "2020-01-01T00:00:00Z",
        "updated_at": "2020-01-01T00:00:00Z",
        "slots": [],
    }
    layout.supervisor_file.write_text(json.dumps(record))
    layout.supervisor_file.chmod(0o600)
    code, report = doctor(layout.root)
    dead = [f for f in report["findings"] if f["code"] == "supervisor_dead"]
    assert code == 1 and dead and "--agents 3" in dead[0]["repair"]


def test_replay_repair_refuses_unfinished_journals(tmp_path: Path) -> None:
    """--repair needs finished journals: an in_progress one sends the user to `loopx recover`."""
    layout = make_root(tmp_path / "root")
    demo_goal(layout, "g", tmp_path / "wd")
    run_one_turn(layout, "g", agent_id="setup")
    path = journal_files(layout, "g")[0]
    doc = json.loads(path.read_text())
    doc.update(status="in_progress", completed_phases=doc["completed_phases"][:4], ended_at=None)
    path.write_text(json.dumps(doc))
    done = loopx(layout.root, "replay", "g", "--repair")
    assert done.returncode == 1 and "loopx recover" in done.stderr
    shutil.rmtree(layout.root)


def test_doctor_reports_directories_the_cli_cannot_write(tmp_path: Path) -> None:
    """goals/ and projections/ at 0500 are errors with a chmod repair, not a healthy root."""
    layout = make_root(tmp_path / "root")
    demo_goal(layout, "g", tmp_path / "wd")
    try:
        for path in (layout.goals_dir, layout.projections_dir):
            path.mkdir(exist_ok=True)
            path.chmod(0o500)
        code, report = doctor(layout.root)
        by_path = {f["path"]: f for f in report["findings"] if f["code"] == "permissions"}
        assert code == 1
        for path in (layout.goals_dir, layout.projections_dir):
            assert by_path[str(path)]["severity"] == "error"
            assert by_path[str(path)]["repair"] == f"chmod 700 {path}"
        follow_repairs(layout.root, report, b"")
        assert doctor(layout.root)[0] == 0
    finally:
        for path in (layout.goals_dir, layout.projections_dir):
            path.chmod(0o700)


def test_doctor_on_a_root_that_is_a_file(tmp_path: Path) -> None:
    """A root that is a regular file is reported as not a directory, not as a symlink."""
    root = tmp_path / "root"
    root.write_text("")
    code, report = doctor(root)
    assert code == 1
    assert [f["code"] for f in report["findings"]] == ["not_a_directory"]
