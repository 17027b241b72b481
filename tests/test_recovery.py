"""recover(): quarantine with a reason, stale leases cleared, idempotent."""

from __future__ import annotations

import json

import pytest

from loopx.turn.recovery import recover
from tests.turnkit import demo_goal, loopx, make_root


def test_damaged_journal_is_quarantined_with_a_reason(tmp_path):
    """A truncated journal moves to quarantine/ beside a reason file; nothing is deleted."""
    layout = make_root(tmp_path / "root")
    demo_goal(layout, "g", tmp_path / "wd")
    bad = layout.turns_dir("g") / "g-t000001-e1.json"
    bad.write_bytes(b'{"schema_version": 1, "goal_')
    report = recover(layout)
    assert not report.clean
    moved = layout.quarantine_dir / "g" / bad.name
    assert report.quarantined == [str(moved)]
    assert moved.read_bytes() == b'{"schema_version": 1, "goal_'
    reason = json.loads((layout.quarantine_dir / "g" / f"{bad.name}.reason.json").read_text())
    assert reason["violations"][0]["code"] == "not_json"
    assert not bad.exists()


def test_goal_runs_again_after_a_quarantine(tmp_path):
    """After quarantining a bad journal the goal's next turn commits."""
    layout = make_root(tmp_path / "root")
    demo_goal(layout, "g", tmp_path / "wd")
    (layout.turns_dir("g") / "g-t000001-e1.json").write_text("[]")
    assert loopx(layout.root, "recover").returncode == 1
    assert loopx(layout.root, "turn", "run-once", "g").returncode == 0


def test_recover_on_a_clean_root_does_nothing(tmp_path):
    """Nothing to recover: no actions, exit 0."""
    layout = make_root(tmp_path / "root")
    demo_goal(layout, "g", tmp_path / "wd")
    assert loopx(layout.root, "turn", "run-once", "g").returncode == 0
    report = recover(layout)
    assert (report.actions, report.clean) == ([], True)


@pytest.mark.parametrize("loss", ["gone", "empty"])
def test_a_run_log_a_power_cut_lost_is_written_again_by_recover_and_by_the_next_claim(
    tmp_path, loss
):
    """The run log is not fsynced: rendered again from the durable terminal journal."""
    layout = make_root(tmp_path / "root")
    demo_goal(layout, "g", tmp_path / "wd")
    assert loopx(layout.root, "turn", "run-once", "g").returncode == 0
    runs = layout.runs_dir("g")
    kept = {p.name: p.read_bytes() for p in runs.iterdir()}
    assert sorted(kept) == ["1.json", "1.md"]

    def lose() -> None:
        for name in kept:
            if loss == "gone":
                (runs / name).unlink()
            else:
                (runs / name).write_bytes(b"")

    lose()
    assert recover(layout).clean
    assert {name: (runs / name).read_bytes() for name in kept} == kept
    lose()
    assert loopx(layout.root, "turn", "run-once", "g").returncode == 0
    assert {name: (runs / name).read_bytes() for name in kept} == kept
    assert sorted(p.name for p in runs.iterdir()) == ["1.json", "1.md", "2.json", "2.md"]
