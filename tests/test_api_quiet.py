"""The Python API in a plain session prints nothing on stdout: no debug logs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.turnkit import cli_env

SCRIPT = """
import sys
import loopx
loopx.Root.init(sys.argv[1])
root = loopx.Root.open(sys.argv[1])
root.goals.add("g", objective="x", host_kind="demo", workdir=sys.argv[2])
root.status.project()
root.status.project()
"""


def test_the_api_prints_no_debug_logs_on_stdout(tmp_path: Path) -> None:
    """`root.status.project()` in a session that configured no logging leaves stdout empty."""
    work = tmp_path / "w"
    work.mkdir()
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "root"), str(work)],
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    assert "debug" not in proc.stderr
