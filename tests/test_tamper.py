"""The tamper guard: what a host may not change while it runs, at a cost independent of history."""

from __future__ import annotations

from pathlib import Path

from loopx.tamper import RECENT, GoalFingerprint
from tests.turnkit import make_root


def _goal(tmp_path: Path, turns: int):  # type: ignore[no-untyped-def]
    layout = make_root(tmp_path / "root")
    layout.ensure_goal_dirs("g")
    for seq in range(1, turns + 1):
        (layout.turns_dir("g") / f"g-t{seq:06d}-e1.json").write_text("{}")
        (layout.runs_dir("g") / f"{seq}.json").write_text("{}")
    layout.history_file("g").write_text("")
    return layout


def test_new_deleted_and_recent_files_are_caught(tmp_path: Path) -> None:
    """Deleting an old journal, editing a recent run log or the history: each is named."""
    layout = _goal(tmp_path, RECENT + 10)
    guard = GoalFingerprint.take(layout, "g", running="g-t999999-e1")
    (layout.turns_dir("g") / "g-t000001-e1.json").unlink()
    (layout.runs_dir("g") / f"{RECENT + 10}.json").write_text('{"x": 1}')
    with layout.history_file("g").open("a") as f:
        f.write("{}\n")
    assert guard.changed(layout, "g", running="g-t999999-e1") == [
        "history.jsonl", f"runs/{RECENT + 10}.json", "turns/g-t000001-e1.json",
    ]


def test_the_running_journal_and_temp_files_are_ignored(tmp_path: Path) -> None:
    """LoopX's own writes to the running turn's journal are not tampering."""
    layout = _goal(tmp_path, 3)
    guard = GoalFingerprint.take(layout, "g", running="g-t000004-e1")
    (layout.turns_dir("g") / "g-t000004-e1.json").write_text("{}")
    (layout.turns_dir("g") / ".g-t000004-e1.json.123.tmp").write_text("{}")
    assert guard.changed(layout, "g", running="g-t000004-e1") == []


def test_only_the_newest_files_are_stat_ed(tmp_path: Path) -> None:
    """The per-turn check stats a bounded number of files however long the history."""
    layout = _goal(tmp_path, 500)
    guard = GoalFingerprint.take(layout, "g", running="g-t999999-e1")
    assert len(guard.files) == 2 + 2 * RECENT
    assert f"runs/{500}.json" in guard.files
    assert "runs/1.json" not in guard.files
