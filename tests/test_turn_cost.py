"""What one turn costs in durable writes and checks, and that the savings keep their guarantees."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from loopx.agents.turn import TurnConfig, run_one_turn
from loopx.errors import LoopxError
from loopx.model import utcnow
from loopx.registry.goalrecords import HostKind, HostSpec
from loopx.registry.goals import GoalChanges, add_goal
from loopx.storage import dirs
from loopx.turn.fencing import read_epoch
from loopx.turn.journal import journal_files
from loopx.turn.lease import claim
from tests.turnkit import demo_goal, make_root

FAST = TurnConfig(lease_ttl_s=5, lease_grace_s=1, kill_grace_s=0.3)
# docs/reliability.md, "What a turn makes durable, fsync by fsync", lists each one.
FSYNCS_PER_TURN = 10


def test_a_committed_turn_makes_the_listed_fsyncs(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A turn after the first makes exactly the fsyncs docs/reliability.md lists."""
    layout = make_root(tmp_path / "root")
    demo_goal(layout, "g", tmp_path / "wd", "--steps", "9")
    run_one_turn(layout, "g", agent_id="a", config=FAST)  # creates the goal's files
    calls: list[int] = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append(fd), real(fd))[1])
    report = run_one_turn(layout, "g", agent_id="a", config=FAST)
    assert report is not None and report.status == "committed"
    assert len(calls) == FSYNCS_PER_TURN


def test_a_lost_counter_rename_never_hands_out_a_journal_s_epoch(tmp_path: Path) -> None:
    """Given a power cut that lost the counter's rename, the next claim passes every journal's epoch."""
    layout = make_root(tmp_path / "root")
    demo_goal(layout, "g", tmp_path / "wd", "--steps", "9")
    for _ in range(2):
        run_one_turn(layout, "g", agent_id="a", config=FAST)
    newest = journal_files(layout, "g")[-1].name
    assert newest == "g-t000002-e2.json"
    # When the counter's rename was not yet durable, it reads as before the claim.
    layout.epoch_file("g").write_text("1\n")
    lease = claim(layout, "g", agent_id="b", now=utcnow()).lease
    assert lease is not None
    assert (lease.epoch, read_epoch(layout, "g")) == (3, 3)


def test_a_turn_reads_the_lease_once(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The lease file is read once per turn (to skip a held goal); the claim's create is its check."""
    layout = make_root(tmp_path / "root")
    demo_goal(layout, "g", tmp_path / "wd", "--steps", "9")
    run_one_turn(layout, "g", agent_id="a", config=FAST)
    lease_path = str(layout.lease_file("g"))
    opened: list[str] = []
    real = os.open

    def counting_open(path, flags, *args, **kwargs):  # type: ignore[no-untyped-def]
        if os.fspath(path) == lease_path and not flags & os.O_CREAT:
            opened.append(lease_path)
        return real(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", counting_open)
    run_one_turn(layout, "g", agent_id="a", config=FAST)
    assert len(opened) == 1


PLANTING_HOST = """
goal="$LOOPX_ROOT/goals/$LOOPX_GOAL_ID"
mv "$goal" "$DECOY" && ln -s "$DECOY" "$goal"
(cd "$DECOY" && find . -type f -exec md5sum {} + | sort) > "$DECOY.sums"
echo '{"schema_version": 1, "kind": "progress", "summary": "planted"}'
"""


def _sums(directory: Path) -> str:
    out = subprocess.run(
        "find . -type f -exec md5sum {} + | sort",
        shell=True,
        cwd=directory,
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout


def test_a_symlink_the_host_planted_is_refused_after_it(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A symlink the host planted over its goal's directory is refused: nothing is written through it."""
    layout = make_root(tmp_path / "root")
    (tmp_path / "wd").mkdir()
    add_goal(
        layout,
        "g",
        GoalChanges(
            objective="plant a symlink",
            workdir=str(tmp_path / "wd"),
            host=HostSpec(kind=HostKind.COMMAND, argv=["/bin/sh", "-c", PLANTING_HOST]),
        ),
        update=False,
        default_workdir=tmp_path / "wd",
        now=utcnow(),
    )
    decoy = tmp_path / "decoy"
    monkeypatch.setenv("DECOY", str(decoy))
    layout.ensure_goal_dirs("g")  # the goal's directories checked before the host
    assert dirs.checked_dirs(layout.goal_dir("g"))
    try:
        run_one_turn(layout, "g", agent_id="a", config=FAST)
    except LoopxError as e:
        assert "symlink" in str(e)
    assert layout.goal_dir("g").is_symlink()
    assert _sums(decoy) == (tmp_path / "decoy.sums").read_text()
