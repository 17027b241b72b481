"""Two `supervisor start`s at once: one runs, the other says so in one line of its own."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.fleet_helpers import clean_env, cli, kill_everything


def test_the_loser_of_two_parallel_starts_names_the_winner(tmp_path: Path) -> None:
    """The loser exits non-zero saying a supervisor runs, without the winner's log lines."""
    root = tmp_path / "root"
    assert cli(root, "init").returncode == 0
    argv = [sys.executable, "-m", "loopx", "--root", str(root), "supervisor", "start"]
    procs = [
        subprocess.Popen(
            [*argv, "--agents", "1"],
            env=clean_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    try:
        outs = [p.communicate(timeout=90) for p in procs]
        codes = sorted(p.returncode for p in procs)
        assert codes[0] == 0, outs
        assert codes[1] != 0, outs
        loser = next(err for p, (_out, err) in zip(procs, outs, strict=True) if p.returncode)
        assert "already running" in loser or "is running" in loser, loser
        assert "supervisor_ready" not in loser and "agent_spawned" not in loser, loser
        assert "Traceback" not in loser
    finally:
        cli(root, "supervisor", "stop")
        kill_everything(root)
