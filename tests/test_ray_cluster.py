"""Two Ray nodes on this machine: goals pinned to each, the second node's raylet SIGKILLed mid-turn.

A head (``nodeA``) and a second node joined with ``ray start --address``
(``nodeB``), each its own raylet and temp dir. The supervisor joins with
``--backend ray --ray-address``; one goal asks for ``nodeA=1``, the other for
``nodeB=1``, so each agent's actor lands on its node. While the nodeB goal's
host runs, nodeB's raylet is SIGKILLed and that agent frozen (SIGSTOP: a
worker that has not learnt yet that its node is gone); a new nodeB node
joins, the restarted actor takes the goal over with a higher epoch, and the
frozen agent, thawed, has its late write refused. Ray's own check that a
worker's raylet still runs is lengthened on the first nodeB, so that the
thawed worker lives long enough to try.

Two raylets on one machine share its hostname, pids and disk; docs/scaling.md
says what that leaves untested.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.fleet_helpers import (
    assert_fleet_invariants,
    cli,
    host_running,
    journals,
    kill_everything,
    record,
    running_agent,
    start_supervisor,
    wait_for,
)
from tests.ray_cluster import RAY_ENV, RayNode, new_node

if importlib.util.find_spec("ray") is None:
    pytest.skip("ray is not installed: pip install -e '.[test,ray]'", allow_module_level=True)

# Three `ray start`s and a takeover: about two minutes on 2 busy cores, so it runs with the soaks.
pytestmark = [pytest.mark.ray, pytest.mark.soak, pytest.mark.timeout(600)]

STEPS = 3  # demo turns until a goal is done
# The first nodeB's workers check that their raylet runs every 10 minutes, not every second.
SLOW_RAYLET_DEATH_CHECK = {"RAY_raylet_death_check_interval_milliseconds": "600000"}
# Soft locks, as a root shared by machines uses (on a network filesystem `auto` picks them):
# a lock the frozen agent held is broken once stale instead of blocking its goal for good.
LOCKS = {"LOOPX_LOCK_MODE": "soft", "LOOPX_SOFT_LOCK_STALE_S": "5"}


@pytest.fixture
def nodes() -> Iterator[list[RayNode]]:
    """The cluster's nodes as the test starts them; every one is killed and removed afterwards."""
    started: list[RayNode] = []
    try:
        yield started
    finally:
        for node in reversed(started):
            node.kill()
            shutil.rmtree(node.temp_dir, ignore_errors=True)


def goal_status(root: Path, goal_id: str) -> str:
    return str(json.loads((root / "goals" / goal_id / "goal.json").read_text())["status"])


def read_epoch(root: Path, goal_id: str) -> int:
    try:
        return int((root / "goals" / goal_id / "epoch").read_text())
    except (FileNotFoundError, ValueError):
        return 0


def add_goal(root: Path, goal_id: str, workdir: Path, resource: str, hang_s: int) -> None:
    """A demo goal of STEPS turns, each host sleeping ``hang_s`` first, pinned by ``resource``."""
    workdir.mkdir()
    done = cli(
        root, "goal", "add", goal_id, "--objective", f"demo {goal_id}", "--workdir", str(workdir),
        "--host-kind", "demo", f"--host=--steps {STEPS} --hang {hang_s}", "--resource", resource,
        **LOCKS,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


def cli_json(root: Path, *args: str) -> Any:
    done = cli(root, *args, "--json", **LOCKS)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def agent_log_events(root: Path) -> list[dict[str, Any]]:
    events = []
    for log in (root / "logs").glob("agent-*.log"):
        events += [
            json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")
        ]
    return events


def history(root: Path, goal_id: str) -> list[dict[str, Any]]:
    path = root / "goals" / goal_id / "history.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def host_runs(workdir: Path, turn_key: str) -> list[int]:
    """The pids of the demo hosts that ran ``turn_key``, in order (``runs.log``)."""
    lines = (workdir / ".loopx-demo" / "runs.log").read_text().splitlines()
    return [int(pid) for key, _attempt, pid in (line.split() for line in lines) if key == turn_key]


def assert_reported_alive_through_ray(
    root: Path, agent_pid: int, node_id: str, others: str
) -> None:
    """`supervisor status` says the agent is alive by Ray, on ``node_id``; `status` counts both."""

    def vouched() -> dict[str, Any] | None:
        # The supervisor learns an actor's pid and node from Ray asynchronously and
        # records them at its next write, which can come after the actor's heartbeat
        # names its pid: until then the slot vouches for no process (CI saw
        # `ray: null` once, right after the host started).
        doc = cli_json(root, "supervisor", "status")
        return doc if all(a["ray"] is not None for a in doc["agents"]) else None

    doc = wait_for("the supervisor to record both actors", vouched, timeout=60)
    view = next(a for a in doc["agents"] if a["pid"] == agent_pid)
    assert (view["alive"], view["checked_by"], view["ray"]["node_id"]) == (True, "ray", node_id)
    other = next(a for a in doc["agents"] if a["pid"] != agent_pid)
    assert (other["alive"], other["ray"]["node_id"]) == (True, others)
    assert cli_json(root, "status")["fleet"]["agents_alive"] == 2


def dead_slot(root: Path) -> dict[str, Any] | None:
    """The slot whose actor Ray reported dead (its node lost), if any."""
    rec = record(root)
    slots = rec["slots"] if rec else []
    return next((s for s in slots if s["last_exit"] and s["last_exit"]["kind"] == "died"), None)


def late_write_refused(root: Path, held: int) -> bool:
    """Whether an agent holding epoch ``held`` logged ``lease_lost`` (only the frozen one held it)."""
    for log in (root / "logs").glob("agent-*.log"):
        for line in log.read_text().splitlines():
            event = json.loads(line) if line.startswith("{") else {}
            if event.get("event") == "lease_lost" and event.get("held") == held:
                return True
    return False


def assert_nothing_lost_or_twice(root: Path, workdirs: dict[str, Path]) -> None:
    """Every goal's STEPS turns committed once each; the journals rebuild the same files."""
    for goal_id, workdir in workdirs.items():
        assert_fleet_invariants(root, goal_id)
        lines = history(root, goal_id)
        assert [line["seq"] for line in lines] == list(range(1, STEPS + 1)), lines
        counter = json.loads((workdir / ".loopx-demo" / "counter.json").read_text())
        assert counter["count"] == STEPS, counter
        verify = cli(root, "replay", goal_id, "--verify", **LOCKS)
        assert verify.returncode == 0, verify.stdout + verify.stderr


def start_two_nodes(nodes: list[RayNode]) -> tuple[RayNode, RayNode]:
    """The head (nodeA) and a second node (nodeB, its raylet death check slowed) joined to it."""
    nodes.append(head := new_node("a", {"nodeA": 2}))
    head.start()
    nodes.append(node_b := new_node("b", {"nodeB": 2}, **SLOW_RAYLET_DEATH_CHECK))
    node_b.start(head.address)
    return head, node_b


def start_pinned_fleet(
    root: Path, address: str, workdirs: dict[str, Path]
) -> subprocess.Popen[bytes]:
    """Goal ga pinned to nodeA, gb (slow hosts) to nodeB; a 2-agent Ray supervisor on the cluster."""
    assert cli(root, "init", **LOCKS).returncode == 0
    add_goal(root, "ga", workdirs["ga"], "nodeA=1", hang_s=1)
    add_goal(root, "gb", workdirs["gb"], "nodeB=1", hang_s=8)
    return start_supervisor(
        root, "--backend", "ray", "--ray-address", address, "--agents", "2",
        "--agent-cpus", "0.5", "--stall-seconds", "300",
        **RAY_ENV, **LOCKS, LOOPX_LEASE_TTL_S="3", LOOPX_LEASE_GRACE_S="2",
    )  # fmt: skip


def test_second_node_lost_mid_turn_its_goal_is_taken_over_and_late_writes_refused(
    root: Path, tmp_path: Path, nodes: list[RayNode]
) -> None:
    """nodeB's raylet SIGKILLed mid-turn: a new nodeB's agent takes over (higher epoch); the old one is refused."""
    head, node_b = start_two_nodes(nodes)
    workdirs = {"ga": tmp_path / "wa", "gb": tmp_path / "wb"}
    proc = start_pinned_fleet(root, head.address, workdirs)
    frozen: int | None = None
    timeline: dict[str, float] = {}
    try:
        # Given: gb's host runs, in an actor on nodeB, reported alive through Ray.
        frozen = wait_for(
            "an agent mid-turn on gb",
            lambda: running_agent(root, "gb") if host_running(root, "gb") else None,
            timeout=180,
        )
        raylet_b = node_b.raylet()
        assert raylet_b is not None
        assert psutil.Process(frozen).ppid() == raylet_b.pid, "gb's agent is not on nodeB"
        assert_reported_alive_through_ray(root, frozen, node_b.node_id(), others=head.node_id())
        held = read_epoch(root, "gb")
        interrupted = next(j for j in journals(root, "gb") if j["status"] == "in_progress")

        # When: nodeB's raylet is SIGKILLed and the agent freezes. In this order: a stopped
        # process in a process group that its raylet's death orphans gets SIGHUP (POSIX).
        raylet_b.kill()
        raylet_b.wait(timeout=30)
        os.kill(frozen, signal.SIGSTOP)
        timeline["raylet_killed"] = time.monotonic()

        # Then: the supervisor learns through Ray that the actor died; nobody may run gb yet.
        died = wait_for("the nodeB actor reported dead", lambda: dead_slot(root), timeout=120)
        timeline["actor_died"] = time.monotonic()
        assert str(frozen) in died["last_exit"]["detail"]
        views = cli_json(root, "supervisor", "status")["agents"]
        assert not next(a for a in views if a["agent_id"] == died["agent_id"])["alive"]
        assert read_epoch(root, "gb") == held

        # A new nodeB joins: the restarted actor, placed there, takes gb over.
        nodes.append(node_b2 := new_node("b2", {"nodeB": 2}))
        node_b2.start(head.address)
        timeline["node_b2_joined"] = time.monotonic()
        # A new raylet joining, the actor placed on it and its first claim: slow on a loaded
        # machine (the soaks run beside this one), so the deadline is generous.
        wait_for("a takeover of gb", lambda: read_epoch(root, "gb") > held, timeout=240)
        timeline["taken_over"] = time.monotonic()
        taker = wait_for(
            "the new agent running gb",
            lambda: (pid := running_agent(root, "gb")) not in (None, frozen) and pid,
            timeout=120,
        )
        assert psutil.Process(taker).ppid() == getattr(node_b2.raylet(), "pid", None)

        # The frozen agent thaws: its late write is refused by the fence.
        os.kill(frozen, signal.SIGCONT)
        wait_for("the late write refused", lambda: late_write_refused(root, held), timeout=60)
        timeline["late_write_refused"] = time.monotonic()
        os.kill(frozen, signal.SIGKILL)  # what Ray's raylet check would do, minutes later

        # Both goals finish; nothing committed is lost or applied twice.
        wait_for(
            "both goals done",
            lambda: goal_status(root, "ga") == goal_status(root, "gb") == "done",
            timeout=180,
        )
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 0
        assert_nothing_lost_or_twice(root, workdirs)
        # The interrupted turn was run again by the new holder (attempt 2); the frozen
        # agent's host result (attempt 1) was never committed.
        final = next(j for j in journals(root, "gb") if j["turn_key"] == interrupted["turn_key"])
        assert (final["status"], final["outcome"]["attempt"]) == ("committed", 2)
        assert final["outcome"]["pid"] != host_runs(workdirs["gb"], interrupted["turn_key"])[0]
        print(  # the figures docs/scaling.md quotes (pytest -s)
            "two-node timeline, seconds after nodeB's raylet was killed: "
            + ", ".join(f"{k} {v - timeline['raylet_killed']:.1f}" for k, v in timeline.items())
        )
    finally:
        if frozen is not None and psutil.pid_exists(frozen):
            os.kill(frozen, signal.SIGKILL)
        kill_everything(root, proc)
