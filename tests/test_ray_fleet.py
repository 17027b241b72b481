"""The Ray back-end on a real local Ray cluster (loopback only): invariants, actor death, a frozen actor.

One cluster per module: a helper process runs ``ray.init(num_cpus=2)`` and
holds it until its stdin closes; each test's supervisor joins it with
``--backend ray --ray-address``. The pytest process never imports ray.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.fleet_helpers import (
    add_demo_goal,
    assert_fleet_invariants,
    clean_env,
    host_running,
    journals,
    kill_everything,
    leftovers,
    record,
    running_agent,
    start_supervisor,
    wait_for,
)

if importlib.util.find_spec("ray") is None:
    pytest.skip("ray is not installed: pip install -e '.[test,ray]'", allow_module_level=True)

pytestmark = [pytest.mark.ray, pytest.mark.timeout(240)]

# Keep the cluster on loopback, quiet, and without a usage report.
RAY_ENV = {
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_AUTH_MODE": "disabled",
    "RAY_DEDUP_LOGS": "0",
}
HOLD_CLUSTER = """
import sys, ray
ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
print(ray.get_runtime_context().gcs_address, flush=True)
sys.stdin.read()
ray.shutdown()
"""


@pytest.fixture(scope="module")
def ray_address() -> Iterator[str]:
    """A local Ray cluster (2 CPUs, loopback) for the module; its GCS address."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_CLUSTER],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        env=clean_env(**RAY_ENV), text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None
        address = holder.stdout.readline().strip()
        assert address.startswith("127.0.0.1:"), f"cluster not on loopback: {address!r}"
        yield address
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        try:
            holder.wait(timeout=60)
        except subprocess.TimeoutExpired:
            holder.kill()
            holder.wait()
        if holder.stdout is not None:
            holder.stdout.close()


def ray_supervisor(root: Path, address: str, *args: str, **env: str) -> subprocess.Popen[bytes]:
    return start_supervisor(
        root, "--backend", "ray", "--ray-address", address, "--agent-cpus", "0.5", *args,
        **RAY_ENV, **env,
    )  # fmt: skip


def goal_status(root: Path, goal_id: str) -> str:
    return str(json.loads((root / "goals" / goal_id / "goal.json").read_text())["status"])


def test_three_actors_finish_ten_goals_with_the_local_invariants(
    root: Path, tmp_path: Path, ray_address: str
) -> None:
    """3 agent actors finish 10 demo goals: all done, no overlap, no duplicate history, journals terminal."""
    goals = [f"g{i:02d}" for i in range(10)]
    for goal_id in goals:
        add_demo_goal(root, goal_id, tmp_path / f"w-{goal_id}", "--steps", "2")
    proc = ray_supervisor(
        root, ray_address, "--agents", "3", "--until-idle", "--idle-horizon-seconds", "10"
    )
    try:
        assert proc.wait(timeout=200) == 0
        assert {goal_status(root, g) for g in goals} == {"done"}
        for goal_id in goals:
            assert_fleet_invariants(root, goal_id)
        final = record(root)
        assert final is not None
        assert (final["backend"], final["state"], len(final["slots"])) == ("ray", "stopped", 3)
        agents_used = {j["agent_id"] for g in goals for j in journals(root, g)}
        assert len(agents_used) >= 2, agents_used
        assert leftovers(root) == []
    finally:
        kill_everything(root, proc)


def test_sigkilled_actor_mid_turn_is_restarted_and_the_turn_recovered(
    root: Path, tmp_path: Path, ray_address: str
) -> None:
    """SIGKILL an actor's worker while its host runs: the slot restarts and the turn is recovered."""
    add_demo_goal(root, "slow", tmp_path / "w", "--steps", "2", "--hang", "2")
    proc = ray_supervisor(root, ray_address, "--agents", "1", "--until-idle")
    try:
        victim = wait_for(
            "an actor mid-turn",
            lambda: running_agent(root, "slow") if host_running(root, "slow") else None,
            timeout=90,
        )
        os.kill(victim, signal.SIGKILL)
        assert proc.wait(timeout=180) == 0
        assert goal_status(root, "slow") == "done"
        slot = record(root)["slots"][0]  # type: ignore[index]
        assert slot["restarts"] >= 1
        assert slot["last_exit"] is not None
        assert_fleet_invariants(root, "slow")
        assert leftovers(root) == []
    finally:
        kill_everything(root, proc)


def read_epoch(root: Path, goal_id: str) -> int:
    try:
        return int((root / "goals" / goal_id / "epoch").read_text())
    except (FileNotFoundError, ValueError):
        return 0


def test_frozen_actor_loses_its_goal_and_its_late_writes_are_refused(
    root: Path, tmp_path: Path, ray_address: str
) -> None:
    """SIGSTOP an actor past its lease: another takes the goal with a higher epoch; after SIGCONT its writes are refused."""
    add_demo_goal(root, "slow", tmp_path / "w", "--steps", "2", "--hang", "3")
    proc = ray_supervisor(
        root, ray_address, "--agents", "2", "--until-idle", "--stall-seconds", "120",
        LOOPX_LEASE_TTL_S="2", LOOPX_LEASE_GRACE_S="1",
    )  # fmt: skip
    frozen = None
    try:
        frozen = wait_for(
            "an actor mid-turn",
            lambda: running_agent(root, "slow") if host_running(root, "slow") else None,
            timeout=90,
        )
        held = read_epoch(root, "slow")
        os.kill(frozen, signal.SIGSTOP)
        wait_for(
            "a takeover with a higher epoch", lambda: read_epoch(root, "slow") > held, timeout=60
        )
        os.kill(frozen, signal.SIGCONT)
        frozen_slot = next(s for s in record(root)["slots"] if s["pid"] == frozen)  # type: ignore[index]
        log = root / "logs" / f"agent-{frozen_slot['index']}.log"

        def refused() -> bool:
            events = [
                json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")
            ]
            return any(e["event"] == "lease_lost" and e.get("held") == held for e in events)

        wait_for("the frozen actor's late write refused (lease_lost)", refused, timeout=60)
        assert proc.wait(timeout=180) == 0
        assert goal_status(root, "slow") == "done"
        assert_fleet_invariants(root, "slow")
        committed = [j for j in journals(root, "slow") if j["status"] == "committed"]
        assert all(
            j["epoch"] != held or j["agent_id"] != frozen_slot["agent_id"] for j in committed[-1:]
        )
        assert leftovers(root) == []
    finally:
        if frozen is not None and psutil.pid_exists(frozen):
            os.kill(frozen, signal.SIGCONT)
        kill_everything(root, proc)


def test_goal_resources_place_actors_with_those_resources(
    root: Path, tmp_path: Path, ray_address: str
) -> None:
    """A goal asking for a resource no node has is never run; the plain goal still finishes."""
    add_demo_goal(root, "plain", tmp_path / "w-plain", "--steps", "1")
    add_demo_goal(root, "gpu", tmp_path / "w-gpu", "--steps", "1")
    done = subprocess.run(
        [sys.executable, "-m", "loopx", "--root", str(root), "goal", "add", "gpu", "--update", "--resource", "fancy_gpu=1"],
        capture_output=True, text=True, env=clean_env(), check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    proc = ray_supervisor(
        root, ray_address, "--agents", "2", "--until-idle", "--idle-horizon-seconds", "5"
    )
    try:
        wait_for("the plain goal done", lambda: goal_status(root, "plain") == "done", timeout=120)
        assert journals(root, "gpu") == []
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        assert leftovers(root) == []
    finally:
        kill_everything(root, proc)
