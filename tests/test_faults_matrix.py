"""Crash at every fault point of a turn, recover, and land on the undisturbed result."""

from __future__ import annotations

from pathlib import Path

import pytest

from loopx.turn.journal import PHASES
from tests.turnkit import demo_goal, demo_runs, durable_snapshot, loopx, loopx_here, make_root

POINTS = [f"{edge}:{phase}" for phase in PHASES for edge in ("before", "after")]
POINTS[2 * 3 + 1 : 2 * 3 + 1] = ["writeback:run_json", "writeback:run_md", "writeback:history"]
HOST_DONE = {p for p in POINTS if p != "before:host_execute"}


@pytest.fixture(scope="module")
def undisturbed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    base = tmp_path_factory.mktemp("undisturbed")
    layout = make_root(base / "root")
    demo_goal(layout, "g", base / "wd")
    assert loopx(layout.root, "turn", "run-once", "g").returncode == 0
    return durable_snapshot(layout, "g", base / "wd")


# The crashes are real processes (os._exit at the fault point); `loopx recover` without a
# fault runs in this process, its report being the point.
def _crash_and_recover(tmp_path: Path, point: str) -> tuple[Path, Path]:
    layout = make_root(tmp_path / "root")
    demo_goal(layout, "g", tmp_path / "wd")
    crashed = loopx(layout.root, "turn", "run-once", "g", LOOPX_FAULT=point)
    assert crashed.returncode == 137, crashed.stderr
    assert f"fault point {point} reached" in crashed.stderr
    return layout.root, tmp_path / "wd"


@pytest.mark.parametrize("point", POINTS)
def test_recovery_after_crash_matches_undisturbed_run(tmp_path, point, undisturbed):
    """A turn killed at `point`, then `loopx recover`, gives the undisturbed files."""
    root, wd = _crash_and_recover(tmp_path, point)
    recovered = loopx_here(root, "recover", "--json")
    assert recovered.returncode == 0, recovered.stdout + recovered.stderr
    if point not in HOST_DONE:
        # The host never finished: recovery leaves the retry to the next claim.
        assert '"retry_pending": [\n    "g-t000001-e1"' in recovered.stdout
        assert loopx(root, "turn", "run-once", "g").returncode == 0
    layout = make_root(root)
    assert durable_snapshot(layout, "g", wd) == undisturbed
    if point in HOST_DONE:
        assert len(demo_runs(wd)) == 1


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("after:host_execute", "writeback:run_md"),
        ("after:host_execute", "after:quota_spend"),
        ("writeback:history", "before:scheduler_ack"),
        ("before:scheduler_apply", "after:scheduler_apply"),
    ],
)
def test_crash_during_recovery_then_recover_again(tmp_path, first, second, undisturbed):
    """Recovery killed at a fault point, recovered again, converges to the same files."""
    root, wd = _crash_and_recover(tmp_path, first)
    again = loopx(root, "recover", LOOPX_FAULT=second)
    assert again.returncode == 137, again.stderr
    assert loopx_here(root, "recover").returncode == 0
    assert loopx_here(root, "recover").returncode == 0  # idempotent: nothing more to do
    assert durable_snapshot(make_root(root), "g", wd) == undisturbed
    assert len(demo_runs(wd)) == 1


def test_host_interrupted_twice_ends_failed(tmp_path):
    """A host killed on both attempts ends the turn failed with host_interrupted."""
    root, wd = _crash_and_recover(tmp_path, "before:host_execute")
    assert loopx_here(root, "recover").returncode == 0
    assert loopx(root, "turn", "run-once", "g", LOOPX_FAULT="before:host_execute").returncode == 137
    report = loopx_here(root, "recover", "--json")
    assert '"decision": "fail"' in report.stdout
    history = (root / "goals" / "g" / "history.jsonl").read_text()
    assert '"failure":"host_interrupted"' in history
    assert demo_runs(wd) == []
