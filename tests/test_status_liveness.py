"""Status tells the truth about liveness: the fleet state comes from process identity too."""

from __future__ import annotations

import json
import os
import signal
from datetime import UTC, datetime
from pathlib import Path

from loopx.fleet import FleetRecord
from loopx.status.fleetview import FleetLiveness, fleet_view
from tests.fleet_helpers import add_demo_goal, cli, kill_everything, supervisor, wait_for

T0 = datetime(2030, 1, 1, tzinfo=UTC)


def _record(state: str) -> FleetRecord:
    return FleetRecord(
        pid=1,
        pid_started_at=0.0,
        hostname="h",
        agents_wanted=2,
        state=state,
        started_at=T0,
        updated_at=T0,
    )


def test_a_recorded_running_supervisor_whose_process_is_gone_is_dead() -> None:
    """The record says running; the process identity says gone: the view says dead."""
    live = FleetLiveness(supervisor_alive=False, live_agents=frozenset())
    assert fleet_view(_record("running"), [], now=T0, live=live).state == "dead"
    assert fleet_view(_record("stopped"), [], now=T0, live=live).state == "stopped"
    assert fleet_view(_record("running"), [], now=T0).state == "running"  # nothing checked


def test_status_after_a_sigkilled_supervisor_says_dead(tmp_path: Path) -> None:
    """`loopx status` right after the supervisor and its agents were SIGKILLed: dead, 0 alive."""
    root = tmp_path / "root"
    assert cli(root, "init").returncode == 0
    add_demo_goal(root, "g", tmp_path / "w", "--hang", "30")
    with supervisor(root, agents=2) as (proc, rec):
        # Warm the status cache while the fleet runs: it must not be served afterwards.
        first = json.loads(cli(root, "status", "--json").stdout)
        assert first["fleet"]["state"] == "running"
        for slot in rec["slots"]:
            os.kill(slot["pid"], signal.SIGKILL)
        proc.kill()
        proc.wait()
        doc = json.loads(cli(root, "status", "--json").stdout)
        assert doc["fleet"]["state"] == "dead"
        assert doc["fleet"]["agents_alive"] == 0
        text = cli(root, "status").stdout
        assert "supervisor dead" in text
        kill_everything(root)
        # `recover` settles the dead record, so doctor stops reporting it.
        assert cli(root, "recover").returncode == 0
        report = json.loads(cli(root, "doctor", "--json").stdout)
        assert "supervisor_dead" not in {f["code"] for f in report["findings"]}
        assert json.loads(cli(root, "status", "--json").stdout)["fleet"]["state"] == "stopped"


def test_status_right_after_until_idle_is_not_running(tmp_path: Path) -> None:
    """Once `--until-idle` returned, status says stopped with no agent alive."""
    root = tmp_path / "root"
    assert cli(root, "init").returncode == 0
    add_demo_goal(root, "g", tmp_path / "w")
    assert cli(root, "status", "--json").returncode == 0  # a cache from before the run
    done = cli(root, "supervisor", "run", "--agents", "3", "--until-idle", timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    doc = wait_for("status", lambda: json.loads(cli(root, "status", "--json").stdout))
    assert doc["fleet"]["state"] == "stopped"
    assert doc["fleet"]["agents_alive"] == 0


def test_status_reports_a_damaged_registry_instead_of_serving_the_cache(tmp_path: Path) -> None:
    """A registry damaged after the last refresh is an error at once, not a young cache."""
    root = tmp_path / "root"
    assert cli(root, "init").returncode == 0
    add_demo_goal(root, "g", tmp_path / "w")
    assert cli(root, "status").returncode == 0
    (root / "registry.json").write_text("{garbage")
    done = cli(root, "status")
    assert done.returncode != 0
    assert "registry.json is damaged" in done.stderr
    assert "Traceback" not in done.stderr
