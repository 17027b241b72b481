"""Agents and hosts never import from the current directory."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fleet_helpers import add_demo_goal, clean_env, kill_everything, leftovers

pytestmark = pytest.mark.timeout(180)


def bogus_checkout_parent(tmp_path: Path) -> Path:
    """A directory holding a `loopx/` folder that is not LoopX (the parent of a checkout)."""
    parent = tmp_path / "src"
    (parent / "loopx" / "agents").mkdir(parents=True)
    (parent / "loopx" / "agents" / "__init__.py").write_text("raise ImportError('bogus')\n")
    return parent


def test_supervisor_started_beside_a_loopx_folder_runs_its_agents(root: Path, tmp_path: Path):
    """From a directory with a bogus `loopx/` (also the goal's workdir), turns still commit."""
    parent = bogus_checkout_parent(tmp_path)
    add_demo_goal(root, "g1", parent, "--steps", "2")
    loopx = shutil.which("loopx", path=str(Path(sys.executable).parent))
    assert loopx is not None
    out = (tmp_path / "supervisor.log").open("wb")
    proc = subprocess.Popen(
        [loopx, "--root", str(root), "supervisor", "run", "--agents", "1", "--until-idle"],
        cwd=parent,
        env=clean_env(),
        stdout=out,
        stderr=out,
    )
    try:
        code = proc.wait(timeout=150)
        log = (tmp_path / "supervisor.log").read_text()
        assert code == 0, log
        assert "agent_crash_loop" not in log
        assert leftovers(root) == []
    finally:
        out.close()
        kill_everything(root, proc)
