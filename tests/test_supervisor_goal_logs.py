"""The supervisor's own log lines about a goal carry its goal_id.

A real supervisor on a tmp root: it recovers a turn of goal ``fix-ci`` that a
crash left half-finished, then the goal's host kills the agent running it (both
host attempts of the turn). The supervisor's lines about that (the recovery,
each agent's end) carry ``goal_id`` and ``turn_key``, and docs/operations.md's
``jq 'select(.goal_id == "fix-ci")'`` selects them. The crash loop's line is
tested in tests/test_supervisor_slots.py (five deaths take too long here).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.fleet_helpers import cli, wait_for

pytestmark = pytest.mark.timeout(180)

GOAL = "fix-ci"
WORKS = """#!/bin/sh
cat > /dev/null
echo '{"kind": "progress", "summary": "fixed a test"}' > "$LOOPX_RESULT_FILE"
"""
KILLS_ITS_AGENT = """#!/bin/sh
kill -9 "$PPID"
"""


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _about(lines: list[dict[str, Any]], event: str) -> list[dict[str, Any]]:
    return [line for line in lines if line.get("event") == event]


def _deaths(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in _about(lines, "agent_exited") if e["level"] == "warning"]


def test_supervisor_lines_about_a_goal_carry_its_id_and_jq_selects_them(tmp_path: Path) -> None:
    """A goal's recovered turn and the agents its host killed: each line names goal and turn."""
    root, work = tmp_path / "root", tmp_path / "work"
    work.mkdir()
    host = work / "host.sh"
    host.write_text(WORKS)
    host.chmod(0o755)
    assert cli(root, "init").returncode == 0
    added = cli(root, "goal", "add", GOAL, "--objective", "make CI green", "--host", "./host.sh",
                "--workdir", str(work))  # fmt: skip
    assert added.returncode == 0, added.stderr
    # A turn whose process died after its host ran: the supervisor's start recovers it.
    crashed = cli(root, "turn", "run-once", GOAL, LOOPX_FAULT="before:scheduler_apply")
    assert crashed.returncode == 137, crashed.stderr
    (pending,) = (root / "goals" / GOAL / "turns").glob("*.json")
    turn_key = pending.name.removesuffix(".json")
    host.write_text(KILLS_ITS_AGENT)  # from now on every turn of the goal kills its agent
    log = root / "logs" / "supervisor.log"
    started = cli(root, "supervisor", "start", "--agents", "1")
    assert started.returncode == 0, started.stderr
    try:
        wait_for(
            "both host attempts of the goal's turn to kill their agent",
            lambda: len(_deaths(_lines(log))) >= 2,
            timeout=90,
            every=0.5,
        )
    finally:
        cli(root, "supervisor", "stop", "--force")
    lines = _lines(log)
    (recovered,) = _about(lines, "journal_recovered")
    assert (recovered["goal_id"], recovered["turn_key"]) == (GOAL, turn_key)
    deaths = _deaths(lines)
    assert {e.get("goal_id") for e in deaths} == {GOAL}, deaths
    assert all(e["turn_key"].startswith(f"{GOAL}-t") for e in deaths), deaths
    # The operations doc's filter, as a user runs it, selects exactly the lines naming the goal.
    jq = shutil.which("jq")
    if jq is None:
        pytest.skip("jq is not installed (.ci/setup.d/jq.sh installs it)")
    selected = subprocess.run(
        [jq, "-c", f'select(.goal_id == "{GOAL}")', str(log)],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout.splitlines()
    assert [json.loads(s) for s in selected] == [e for e in lines if e.get("goal_id") == GOAL]
    assert {json.loads(s)["event"] for s in selected} >= {"journal_recovered", "agent_exited"}
