"""Crash at the fault points of the stall ladder's rows, recover, land on the undisturbed files.

The goal runs the fake claude with a short stall timeout: in ``stall_fresh``
mode a new session stalls and a resumed one finishes (the ladder ends on
rung 1), in ``stall`` mode every run stalls (the ladder climbs to its gate).
Each turn is a real ``loopx turn run-once`` that dies at the point; ``loopx
recover`` runs, the next claim finishes the turn; the goal's durable files
then equal an undisturbed run's (session ids and clock times aside: the
fake makes a new session id per run).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from loopx.testing import install_fake_host
from tests.turnkit import durable_snapshot, loopx, loopx_here, make_root

pytestmark = pytest.mark.timeout(240)

UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
CLOCK = re.compile(r"\d\d:\d\d:\d\d")
TURN_EPOCH = re.compile(r"(-t\d{6}-e)\d+\b")
EPOCH_FIELD = re.compile(r"(epoch\\*\": )\d+")
RESUMED = [f"{edge}:stall_resume" for edge in ("before", "after")]
GATED = [
    f"{edge}:{row}"
    for row in ("stall_fresh", "stall_handoff", "stall_gate")
    for edge in ("before", "after")
]


def _env(base: Path, mode: str) -> dict[str, str]:
    bin_dir = base / "bin"
    if not (bin_dir / "claude").exists():
        install_fake_host(bin_dir, "claude")
    return {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "FAKE_CLAUDE_HOME": str(base / "claude"),
        "FAKE_CLAUDE_MODE": mode,
        "LOOPX_KILL_GRACE_S": "0.5",
    }


def _goal(base: Path, stall_timeout: str) -> Path:
    work = base / "work"
    work.mkdir()
    root = make_root(base / "root").root
    added = loopx(
        root, "goal", "add", "g", "--objective", "make it work", "--workdir", str(work),
        "--host-kind", "claude", "--stall-timeout", stall_timeout, **_env(base, "stall"),
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    return root


def _snapshot(root: Path) -> object:
    layout = make_root(root)
    text = json.dumps(durable_snapshot(layout, "g", root.parent / "work"))
    text = TURN_EPOCH.sub(r"\g<1>0", CLOCK.sub("<clock>", UUID.sub("<session>", text)))
    return json.loads(EPOCH_FIELD.sub(r"\g<1>0", text))


def _turn_finished(root: Path) -> bool:
    turns = sorted((root / "goals" / "g" / "turns").glob("*.json"))
    return any(json.loads(p.read_text())["status"] != "in_progress" for p in turns)


def _undisturbed(base: Path, mode: str, stall_timeout: str) -> object:
    root = _goal(base, stall_timeout)
    done = loopx(root, "turn", "run-once", "g", timeout=120, **_env(base, mode))
    assert done.returncode == 0, done.stderr
    return _snapshot(root)


def _killed_and_recovered(base: Path, mode: str, stall_timeout: str, point: str) -> object:
    root = _goal(base, stall_timeout)
    env = _env(base, mode)
    crashed = loopx(root, "turn", "run-once", "g", timeout=120, LOOPX_FAULT=point, **env)
    assert crashed.returncode == 137, crashed.stderr
    assert f"fault point {point} reached" in crashed.stderr
    recovered = loopx_here(root, "recover")
    assert recovered.returncode == 0, recovered.stdout + recovered.stderr
    if not _turn_finished(root):
        again = loopx(root, "turn", "run-once", "g", timeout=120, **env)
        assert again.returncode == 0, again.stderr
    return _snapshot(root)


@pytest.fixture(scope="module")
def resumed(tmp_path_factory: pytest.TempPathFactory) -> object:
    return _undisturbed(tmp_path_factory.mktemp("resumed"), "stall_fresh", "1")


@pytest.fixture(scope="module")
def gated(tmp_path_factory: pytest.TempPathFactory) -> object:
    return _undisturbed(tmp_path_factory.mktemp("gated"), "stall", "0.5")


@pytest.mark.parametrize("point", RESUMED)
def test_killed_on_rung_one_recovered_gives_the_undisturbed_files(
    tmp_path: Path, point: str, resumed: object
) -> None:
    """Killed around the resume rung, recovered: the same files as a run the ladder resumed."""
    assert _killed_and_recovered(tmp_path, "stall_fresh", "1", point) == resumed


@pytest.mark.soak
@pytest.mark.parametrize("point", GATED)
def test_killed_higher_on_the_ladder_recovered_gives_the_undisturbed_files(
    tmp_path: Path, point: str, gated: object
) -> None:
    """Killed around the fresh-session rung or the gate, recovered: the same gate's files."""
    assert _killed_and_recovered(tmp_path, "stall", "0.5", point) == gated
