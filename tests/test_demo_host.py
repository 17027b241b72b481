"""The demo host on its own: deterministic counter, idempotent per turn key."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.turnkit import cli_env


def _demo(tmp_path, key: str, *args: str) -> dict:
    result = tmp_path / "result.json"
    env = cli_env(LOOPX_TURN_KEY=key, LOOPX_RESULT_FILE=str(result))
    proc = subprocess.run(
        [sys.executable, "-m", "loopx.agents.demo", *args],
        input=json.dumps({"turn_key": key}),
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert proc.returncode == 0
    return json.loads(result.read_text())


def test_counter_advances_once_per_turn_key(tmp_path):
    """Running the same turn twice does not advance the counter twice; runs are all logged."""
    assert _demo(tmp_path, "k1")["summary"] == "counter at 1 of 3"
    assert _demo(tmp_path, "k1")["summary"] == "counter at 1 of 3"
    assert _demo(tmp_path, "k2")["summary"] == "counter at 2 of 3"
    assert _demo(tmp_path, "k3", "--steps", "3")["kind"] == "completed"
    runs = (tmp_path / ".loopx-demo" / "runs.log").read_text().splitlines()
    assert [r.split()[0] for r in runs] == ["k1", "k1", "k2", "k3"]


def test_switches_come_from_the_environment_too(tmp_path):
    """LOOPX_DEMO_ARGS adds switches (here: report wait)."""
    result = tmp_path / "r.json"
    env = cli_env(
        LOOPX_TURN_KEY="k",
        LOOPX_RESULT_FILE=str(result),
        LOOPX_DEMO_ARGS="--kind wait --wait-seconds 5",
    )
    subprocess.run(
        [sys.executable, "-m", "loopx.agents.demo"],
        input=b"{}",
        cwd=tmp_path,
        env=env,
        check=True,
        timeout=60,
        capture_output=True,
    )
    doc = json.loads(result.read_text())
    assert (doc["kind"], doc["wait_seconds"]) == ("wait", 5)
