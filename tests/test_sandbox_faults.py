"""Crash at the sandbox's rows of a sandboxed turn, recover, land on the same files.

The goal is sandboxed with a done-check, so the ``sandbox`` and
``close_sandbox`` rows apply (tests/test_steps_faults.py crashes at every
other row with an unsandboxed goal). The host counts its runs in its own
home (``goals/g/sandbox/home``, which survives the turn): once the host's
outcome is durable it never runs again. A crash before the check leaves a
turn whose resumption opens the sandbox again for its check alone.
"""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path

import pytest

from tests.turnkit import durable_snapshot, loopx, loopx_here, make_root

pytestmark = [
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed"),
    pytest.mark.timeout(60),
]

HOST = """\
cat > /dev/null
echo "$LOOPX_TURN_KEY" >> "$HOME/host-runs.log"
echo "notes" > notes.txt
printf '{"kind": "completed", "summary": "notes written"}' > "$LOOPX_RESULT_FILE"
"""
# before:done_check: the host's outcome is written; the resumed turn reopens the sandbox to check.
POINTS = ["before:sandbox", "after:sandbox", "before:done_check", "before:close_sandbox"]
# From here on the host's outcome is durable: it never runs again.
HOST_DURABLE = ("before:done_check", "before:close_sandbox")


def _goal(base: Path) -> Path:
    wd = base / "wd"
    wd.mkdir()
    root = make_root(base / "root").root
    added = loopx_here(
        root, "goal", "add", "g", "--objective", "write the notes", "--workdir", str(wd),
        "--host", shlex.join(["sh", "-c", HOST]), "--done-check", "test -f notes.txt",
        "--sandbox", "bwrap",
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    return root


def _host_runs(root: Path) -> list[str]:
    path = root / "goals" / "g" / "sandbox" / "home" / "host-runs.log"
    return path.read_text().splitlines() if path.exists() else []


def _snapshot(root: Path) -> object:
    return durable_snapshot(make_root(root), "g", root.parent / "wd")


def _finished(root: Path) -> bool:
    turns = sorted((root / "goals" / "g" / "turns").glob("*.json"))
    return any(json.loads(p.read_text())["status"] != "in_progress" for p in turns)


@pytest.fixture(scope="module")
def undisturbed(tmp_path_factory: pytest.TempPathFactory) -> object:
    root = _goal(tmp_path_factory.mktemp("undisturbed"))
    done = loopx(root, "turn", "run-once", "g")
    assert done.returncode == 0, done.stderr
    assert len(_host_runs(root)) == 1
    return _snapshot(root)


@pytest.mark.parametrize("point", POINTS)
def test_killed_at_a_sandbox_row_recovered_gives_the_undisturbed_files(
    tmp_path: Path, point: str, undisturbed: object
) -> None:
    """Killed at `point`, `loopx recover`, the next claim if the turn was cut short: same files."""
    root = _goal(tmp_path)
    crashed = loopx(root, "turn", "run-once", "g", LOOPX_FAULT=point)
    assert crashed.returncode == 137, crashed.stderr
    recovered = loopx_here(root, "recover")
    assert recovered.returncode == 0, recovered.stdout + recovered.stderr
    if not _finished(root):
        again = loopx(root, "turn", "run-once", "g")
        assert again.returncode == 0, again.stderr
    assert _snapshot(root) == undisturbed
    if point in HOST_DURABLE:
        assert len(_host_runs(root)) == 1
