"""Crash at every fault point of every row of the turn's table, recover, land on the same files.

The points are generated from the table (:func:`loopx.turn.steps.fault_points`),
so a new row is covered by adding it. The goal is one every row applies to:
a ``--worktree`` goal with a done-check, ``--auto-merge`` and a fallback
account (its own admits it: the hand-off row runs and keeps it), whose host
writes and commits one file (idempotently: a host run again after a crash
commits nothing new). Each turn is a real ``loopx turn run-once`` process
that dies at the point; ``loopx recover`` then runs, and the next claim
finishes a turn that was cut short; the root's files then equal an
undisturbed run's.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from loopx.testing.gitwork import git, make_repo
from loopx.turn.steps import STEPS, fault_points
from tests.turnkit import durable_snapshot, loopx, loopx_here, make_root

pytestmark = pytest.mark.timeout(240)

HOST = """\
cat > /dev/null
echo "$LOOPX_TURN_KEY" >> "$LOOPX_ROOT/../host-runs.log"
echo "notes" > notes.txt
git add notes.txt
git diff --cached --quiet || git commit -q -m "write the notes"
printf '{"kind": "completed", "summary": "notes written"}' > "$LOOPX_RESULT_FILE"
"""
# The stall ladder's rows apply to a stalled host only: tests/test_stall_faults.py kills them.
LADDER = ("stall_resume", "stall_fresh", "stall_handoff", "stall_gate")
# The sandbox's rows apply to a sandboxed goal only: tests/test_sandbox_faults.py crashes there.
SANDBOX_ROWS = ("sandbox", "close_sandbox")
POINTS = list(fault_points([s for s in STEPS if s.name not in LADDER + SANDBOX_ROWS]))
TURN_EPOCH = re.compile(r"(-t\d{6}-e)\d+\b")
EPOCH_FIELD = re.compile(r"(epoch\\*\": )\d+")
# From here on the host's outcome is durable: it never runs again.
OUTCOME_DURABLE = POINTS.index("after:check")


def _goal(base: Path) -> tuple[Path, Path]:
    """A root with goal `g` on a fresh repository; the root and where the host logs its runs."""
    repo = make_repo(base / "repo")
    root = make_root(base / "root").root
    spare = loopx_here(root, "account", "add", "spare", "--host-kind", "command")
    assert spare.returncode == 0, spare.stderr
    added = loopx_here(
        root, "goal", "add", "g", "--objective", "write the notes", "--workdir", str(repo),
        "--worktree", "--host", shlex.join(["sh", "-c", HOST]), "--done-check", "test -f notes.txt",
        "--auto-merge", "--fallback-account", "spare",
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    return root, base


def _host_runs(tools: Path) -> list[str]:
    path = tools / "host-runs.log"
    return path.read_text().splitlines() if path.exists() else []


def _snapshot(root: Path) -> object:
    """The goal's durable files, the lease epoch aside.

    A turn killed before its journal exists leaves only a dead holder's lease:
    the next claim takes it over and plans the same turn under the next epoch.
    """
    layout = make_root(root)
    text = json.dumps(durable_snapshot(layout, "g", root / "worktrees" / "g"))
    return json.loads(EPOCH_FIELD.sub(r"\g<1>0", TURN_EPOCH.sub(r"\g<1>0", text)))


def _turn_finished(root: Path) -> bool:
    turns = sorted((root / "goals" / "g" / "turns").glob("*.json"))
    return any(json.loads(p.read_text())["status"] != "in_progress" for p in turns)


@pytest.fixture(scope="module")
def undisturbed(tmp_path_factory: pytest.TempPathFactory) -> object:
    base = tmp_path_factory.mktemp("undisturbed")
    root, tools = _goal(base)
    done = loopx(root, "turn", "run-once", "g", timeout=120)
    assert done.returncode == 0, done.stderr
    assert len(_host_runs(tools)) == 1
    assert git(base / "repo", "show", "main:notes.txt") == "notes"  # merged
    return _snapshot(root)


def test_every_row_of_the_table_has_its_points() -> None:
    """Two points per row, in the table's order."""
    assert POINTS[:2] == ["before:claim", "after:claim"]
    assert len(POINTS) == 2 * (len(STEPS) - len(LADDER) - len(SANDBOX_ROWS))


@pytest.mark.parametrize("point", POINTS)
def test_killed_at_a_step_recovered_gives_the_undisturbed_files(
    tmp_path: Path, point: str, undisturbed: object
) -> None:
    """Killed at `point`, `loopx recover`, the next claim if the turn was cut short: same files."""
    root, tools = _goal(tmp_path)
    crashed = loopx(root, "turn", "run-once", "g", timeout=120, LOOPX_FAULT=point)
    assert crashed.returncode == 137, crashed.stderr
    assert f"fault point {point} reached" in crashed.stderr
    recovered = loopx_here(root, "recover")
    assert recovered.returncode == 0, recovered.stdout + recovered.stderr
    if not _turn_finished(root):
        again = loopx(root, "turn", "run-once", "g", timeout=120)
        assert again.returncode == 0, again.stderr
    assert _snapshot(root) == undisturbed
    if POINTS.index(point) >= OUTCOME_DURABLE:
        assert len(_host_runs(tools)) == 1
