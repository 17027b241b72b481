"""The tamper guard: what a host may not change while it runs, at a cost independent of history."""

from __future__ import annotations

from pathlib import Path

from loopx.turn.tamper import RECENT, GoalFingerprint
from tests.turnkit import make_root

RUNNING = "g-t000999-e1"


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
    layout = _goal(tmp_path, 998)
    guard = GoalFingerprint.take(layout, "g", running=RUNNING)
    (layout.turns_dir("g") / "g-t000001-e1.json").unlink()
    (layout.runs_dir("g") / "998.json").write_text('{"x": 1}')
    with layout.history_file("g").open("a") as f:
        f.write("{}\n")
    assert guard.changed(layout, "g", running=RUNNING) == [
        "history.jsonl",
        "runs/998.json",
        "turns/",
    ]


def test_a_file_created_in_runs_is_caught(tmp_path: Path) -> None:
    """A new file in runs/ (however named) moves the directory's stamp."""
    layout = _goal(tmp_path, 3)
    guard = GoalFingerprint.take(layout, "g", running="g-t000004-e1")
    (layout.runs_dir("g") / "forged.md").write_text("x")
    assert guard.changed(layout, "g", running="g-t000004-e1") == ["runs/"]


def test_an_untouched_goal_has_no_changes(tmp_path: Path) -> None:
    """Reading files changes nothing the guard watches."""
    layout = _goal(tmp_path, 20)
    guard = GoalFingerprint.take(layout, "g", running="g-t000021-e1")
    _ = [p.read_text() for p in layout.turns_dir("g").iterdir()]
    assert guard.changed(layout, "g", running="g-t000021-e1") == []


def test_only_the_newest_files_are_stat_ed(tmp_path: Path) -> None:
    """The per-turn check stats a bounded number of files however long the history."""
    layout = _goal(tmp_path, 998)
    guard = GoalFingerprint.take(layout, "g", running=RUNNING)
    assert len(guard.files) == 4 + 3 * RECENT
    assert "runs/998.json" in guard.files
    assert "turns/g-t000998-e1.json" in guard.files
    assert "runs/1.json" not in guard.files
