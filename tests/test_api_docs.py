"""Every ```python block of docs/api.md runs, in order, against a fresh root."""

from __future__ import annotations

import json
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


# Blocks that start processes (the fleet, the demo) get an interpreter of their own; a run of
# other blocks shares one, each block with fresh globals (a missing import still fails).
STARTS_PROCESSES = ("root.fleet.", "Root.demo(")

RUN_BLOCKS = """
import json, sys
for number, code in json.loads(sys.argv[1]):
    print(f"--- block {number}", file=sys.stderr, flush=True)
    exec(compile(code, f"<block {number}>", "exec"), {"__name__": "__main__"})
"""


def interpreters(codes: list[str]) -> list[list[tuple[int, str]]]:
    """The numbered blocks, grouped by the interpreter each runs in, in order."""
    groups: list[list[tuple[int, str]]] = []
    for number, code in enumerate(codes, start=1):
        alone = any(mark in code for mark in STARTS_PROCESSES)
        if alone or not groups or any(m in groups[-1][0][1] for m in STARTS_PROCESSES):
            groups.append([])
        groups[-1].append((number, code))
    return groups


@pytest.mark.timeout(600)
def test_every_python_block_runs(tmp_path: Path) -> None:
    """The blocks in order, in fresh interpreters; LOOPX_ROOT, TMPDIR and the cwd in tmp_path."""
    work = tmp_path / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPX_")}
    env["LOOPX_ROOT"] = str(tmp_path / "root")
    env["TMPDIR"] = str(tmp_path)  # the demo's fresh directory lands here, not in /tmp
    groups = interpreters(blocks())
    assert sum(map(len, groups)) == len(blocks()) and len(groups) < len(blocks())
    for group in groups:
        done = subprocess.run(
            [sys.executable, "-c", RUN_BLOCKS, json.dumps(group)],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        numbers = [n for n, _ in group]
        assert done.returncode == 0, f"blocks {numbers} of {DOC.name}:\n{done.stderr}"
