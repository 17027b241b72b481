"""The turn's table of steps: a new row runs, is journaled, gets fault points and recovers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from loopx.turn.journal import PHASES
from loopx.turn.outcome import TurnStatus
from loopx.turn.steps import STEPS, fault_points
from tests.stepkit import NOOP, noop_runs, run_turn, with_noop
from tests.turnkit import (
    cli_env,
    demo_goal,
    demo_runs,
    durable_snapshot,
    loopx,
    loopx_here,
    make_root,
)

REPO = Path(__file__).resolve().parent.parent
KEY = "g-t000001-e1"


def test_the_table_reads_like_the_design() -> None:
    """Claim first, release last but the merge; every row named once."""
    names = [s.name for s in STEPS]
    assert names == [
        "claim", "leftovers", "workdir", "worktree", "quota", "handoff", "account", "host_kind",
        "journal", "sandbox", "host", "stall_resume", "stall_fresh", "stall_handoff",
        "stall_gate", "settle", "check", "writeback", "close_sandbox", "unlock_workdir",
        "release", "merge",
    ]  # fmt: skip
    assert len(set(fault_points())) == 2 * len(STEPS)
    assert not {s.name for s in STEPS} & set(PHASES)  # a row's points never shadow a phase's


def test_a_new_row_runs_once_is_journaled_and_leaves_the_files_alone(tmp_path: Path) -> None:
    """A no-op row after `settle`: it runs once, the journal records it, the files are as ever."""
    plain, extra = make_root(tmp_path / "plain"), make_root(tmp_path / "extra")
    demo_goal(plain, "g", tmp_path / "wd-plain")
    demo_goal(extra, "g", tmp_path / "wd-extra")
    assert run_turn(plain, "g", STEPS).report is not None
    attempt = run_turn(extra, "g", with_noop())
    assert attempt.report is not None
    assert attempt.report.status is TurnStatus.COMMITTED
    assert noop_runs(tmp_path / "wd-extra") == [KEY]
    journal = json.loads((extra.turns_dir("g") / f"{KEY}.json").read_text())
    assert journal["completed_steps"] == ["journal", "host", "settle", "noop"]
    assert durable_snapshot(extra, "g", tmp_path / "wd-extra") == durable_snapshot(
        plain, "g", tmp_path / "wd-plain"
    )
    table = with_noop()
    assert [s for s in table if s is not NOOP] == list(STEPS)  # no other row touched
    assert {"before:noop", "after:noop"} <= set(fault_points(table))


def _stepkit(root: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """One turn through the table with the no-op row, in a process of its own."""
    return subprocess.run(
        [sys.executable, "-m", "tests.stepkit", str(root), "g"],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=cli_env(**env),
        timeout=60,
        check=False,
    )


@pytest.fixture(scope="module")
def undisturbed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    base = tmp_path_factory.mktemp("undisturbed")
    layout = make_root(base / "root")
    demo_goal(layout, "g", base / "wd")
    assert loopx(layout.root, "turn", "run-once", "g").returncode == 0
    return durable_snapshot(layout, "g", base / "wd")


@pytest.mark.parametrize("point", ["before:noop", "after:noop"])
def test_killed_at_a_new_rows_fault_points_the_turn_recovers(
    tmp_path: Path, point: str, undisturbed: dict[str, object]
) -> None:
    """Killed at the no-op row's points, recovered, run again: an undisturbed run's files."""
    layout = make_root(tmp_path / "root")
    demo_goal(layout, "g", tmp_path / "wd")
    crashed = _stepkit(layout.root, LOOPX_FAULT=point)
    assert crashed.returncode == 137, crashed.stderr
    assert f"fault point {point} reached" in crashed.stderr
    assert loopx_here(layout.root, "recover").returncode == 0
    # The host's outcome was not durable yet: the next claim runs the host again.
    again = _stepkit(layout.root)
    assert again.returncode == 0, again.stderr
    assert durable_snapshot(layout, "g", tmp_path / "wd") == undisturbed
    assert noop_runs(tmp_path / "wd")[-1] == KEY
    assert len(demo_runs(tmp_path / "wd")) == 2


def test_a_journal_written_before_the_table_resumes_at_its_first_unrecorded_step(
    tmp_path: Path, undisturbed: dict[str, object]
) -> None:
    """A journal without `completed_steps` (an older LoopX's) resumes by its phases alone."""
    layout = make_root(tmp_path / "root")
    demo_goal(layout, "g", tmp_path / "wd")
    crashed = loopx(layout.root, "turn", "run-once", "g", LOOPX_FAULT="after:journal")
    assert crashed.returncode == 137, crashed.stderr
    path = layout.turns_dir("g") / f"{KEY}.json"
    older = json.loads(path.read_text())
    del older["completed_steps"]
    path.write_text(json.dumps(older, indent=2) + "\n")
    assert loopx(layout.root, "turn", "run-once", "g").returncode == 0  # the host again
    assert durable_snapshot(layout, "g", tmp_path / "wd") == undisturbed
    assert len(demo_runs(tmp_path / "wd")) == 1
