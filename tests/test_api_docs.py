"""Every ```python block of docs/api.md runs, in order, against a fresh root."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parent.parent / "docs" / "api.md"
BLOCK = re.compile(r"^```python\n(.*?)^```$", re.DOTALL | re.MULTILINE)


def blocks() -> list[str]:
    """The page's Python examples, in order."""
    return BLOCK.findall(DOC.read_text())


def test_the_page_has_an_example_for_every_group() -> None:
    """Goals, gates, status, quota, turns, a host adapter, the fleet, serve, demo, schemas."""
    text = "\n".join(blocks())
    for call in (
        "root.goals.",
        "root.gates.",
        "root.status.",
        "root.quota.",
        "root.turns.",
        "host=CountingHost()",
        "root.fleet.start",
        "root.fleet.run(",
        "child=True",
        "root.fleet.run_agent(",
        "root.fleet.attach_command(",
        "root.fleet.run_until_idle",
        "root.serve(",
        "Root.demo(",
        "Root.schema(",
    ):
        assert call in text


@pytest.mark.timeout(600)
def test_every_python_block_runs(tmp_path: Path) -> None:
    """Each block in a fresh interpreter; LOOPX_ROOT, TMPDIR and the cwd point into tmp_path."""
    work = tmp_path / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPX_")}
    env["LOOPX_ROOT"] = str(tmp_path / "root")
    env["TMPDIR"] = str(tmp_path)  # the demo's fresh directory lands here, not in /tmp
    for number, code in enumerate(blocks(), start=1):
        done = subprocess.run(
            [sys.executable, "-c", code],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, f"block {number} of {DOC.name}:\n{code}\n{done.stderr}"
