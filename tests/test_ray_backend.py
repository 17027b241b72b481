"""The Ray back-end's parts that need no cluster: the missing-ray error, resource profiles, goal resources, liveness."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from loopx.agents.loop import fits
from loopx.fleet import (
    AgentHeartbeat,
    AgentPhase,
    AgentSlot,
    Backend,
    FleetRecord,
    FleetState,
    LivenessCheck,
    RayPlacement,
)
from loopx.model import utcnow
from loopx.process import ProcessIdentity
from loopx.registry.goalrecords import Goal, GoalStatus, Registry
from loopx.root import Layout
from loopx.status.sources import fleet_liveness, read_fleet
from loopx.storage.files import atomic_write_model
from loopx.supervisor.control import status_document
from loopx.supervisor.ray_backend import profile_for, resource_profiles
from tests.fleet_helpers import clean_env

NOW = datetime(2030, 1, 1, tzinfo=UTC)
HIDE_RAY = (
    "import runpy, sys; sys.modules['ray'] = None; sys.argv = ['loopx', *sys.argv[1:]]; "
    "runpy.run_module('loopx', run_name='__main__')"
)


def goal(goal_id: str, status: GoalStatus = GoalStatus.ACTIVE, **resources: float) -> Goal:
    return Goal(
        id=goal_id,
        objective="o",
        workdir="/w",
        status=status,
        resources=resources,
        created_at=NOW,
        updated_at=NOW,
    )


def test_backend_ray_without_ray_says_how_to_install(tmp_path: Path) -> None:
    """--backend ray where ray cannot be imported: exit 2, one line naming `pip install 'loopx[ray]'`."""
    init = [sys.executable, "-m", "loopx", "--root", str(tmp_path / "root"), "init"]
    subprocess.run(init, capture_output=True, env=clean_env(), timeout=60, check=True)
    done = subprocess.run(
        [sys.executable, "-c", HIDE_RAY, "--root", str(tmp_path / "root"), "supervisor", "run", "--backend", "ray"],
        capture_output=True, text=True, env=clean_env(), timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "pip install 'loopx[ray]'" in done.stderr
    assert "Traceback" not in done.stderr


def test_resource_profiles_put_plain_first_and_skip_inactive() -> None:
    """Distinct resource sets of active goals, the plain one first when a goal needs none."""
    reg = Registry(
        goals={
            g.id: g
            for g in [
                goal("a"),
                goal("b", gpu=1),
                goal("c", gpu=1),
                goal("d", GoalStatus.DONE, tpu=2),
            ]
        }
    )
    profiles = resource_profiles(reg)
    assert profiles == [{}, {"gpu": 1.0}]
    assert [profile_for(profiles, i) for i in (1, 2, 3)] == [{}, {"gpu": 1.0}, {}]
    only_gpu = Registry(goals={"b": goal("b", gpu=1)})
    assert resource_profiles(only_gpu) == [{"gpu": 1.0}]
    assert resource_profiles(Registry()) == [{}]


def test_agent_runs_only_goals_it_has_resources_for() -> None:
    """An agent holding {gpu: 1} runs plain and gpu goals; a plain agent only plain ones; local runs all."""
    plain, gpu = goal("a"), goal("b", gpu=1)
    assert (fits(plain, {}), fits(gpu, {})) == (True, False)
    assert (fits(plain, {"gpu": 1}), fits(gpu, {"gpu": 1})) == (True, True)
    assert fits(gpu, None)


def test_goal_add_resource_flag(tmp_path: Path) -> None:
    """`goal add --resource gpu=1 --resource licence=0.5` stores the goal's resources; a bad one is refused."""
    base = [
        sys.executable,
        "-m",
        "loopx",
        "--root",
        str(tmp_path / "root"),
        "goal",
        "add",
        "g",
        "--objective",
        "o",
        "--workdir",
        str(tmp_path),
    ]
    init = [sys.executable, "-m", "loopx", "--root", str(tmp_path / "root"), "init"]
    subprocess.run(init, capture_output=True, env=clean_env(), timeout=60, check=True)
    done = subprocess.run(
        [*base, "--resource", "gpu=1", "--resource", "licence=0.5", "--json"],
        capture_output=True,
        text=True,
        env=clean_env(),
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["goal"]["resources"] == {"gpu": 1.0, "licence": 0.5}
    bad = subprocess.run(
        [*base, "--update", "--resource", "gpu"],
        capture_output=True,
        text=True,
        env=clean_env(),
        check=False,
    )
    assert bad.returncode == 2
    assert "--resource" in bad.stderr


def publish_ray_fleet(layout: Layout, *, state: FleetState = FleetState.RUNNING) -> None:
    """This process poses as a Ray supervisor whose agent-1 runs on another node (pid 4242 there)."""
    me = ProcessIdentity.current()
    placement = RayPlacement(
        node_id="b" * 56, node_ip="10.0.0.2", hostname="node-b", actor_id="a" * 32
    )
    record = FleetRecord(
        pid=me.pid,
        pid_started_at=me.started_at,
        hostname=socket.gethostname(),
        agents_wanted=2,
        backend=Backend.RAY,
        state=state,
        started_at=NOW,
        updated_at=NOW,
        slots=[
            AgentSlot(index=1, agent_id="agent-1", pid=4242, pid_started_at=7.0, ray=placement),
            AgentSlot(index=2, agent_id="agent-2"),  # its actor died; the slot waits for a node
        ],
    )
    atomic_write_model(layout.supervisor_file, record)
    for agent_id in ("agent-1", "agent-2"):
        beat = AgentHeartbeat(
            agent_id=agent_id,
            pid=4242,
            pid_started_at=7.0,  # no process here started then: a local lookup says dead
            hostname="node-b",
            phase=AgentPhase.RUNNING,
            started_at=utcnow(),
            beat_at=utcnow(),
        )
        atomic_write_model(layout.agent_file(agent_id), beat)


def test_ray_agent_on_another_node_is_alive_while_the_supervisor_holds_its_actor(
    layout: Layout,
) -> None:
    """A Ray agent whose pid means nothing here: alive by the running supervisor's slot, with its node."""
    publish_ray_fleet(layout)
    doc = status_document(layout)
    views = {a.agent_id: a for a in doc.agents}
    assert (views["agent-1"].alive, views["agent-1"].checked_by) == (True, LivenessCheck.RAY)
    assert views["agent-1"].ray is not None
    assert views["agent-1"].ray.node_ip == "10.0.0.2"
    assert (views["agent-2"].alive, views["agent-2"].ray) == (False, None)
    fleet, beats = read_fleet(layout)
    assert fleet_liveness(layout, fleet, beats).live_agents == frozenset({"agent-1"})


def test_a_stopped_ray_supervisor_vouches_for_no_agent(layout: Layout) -> None:
    """Once the Ray supervisor stopped, its record proves nothing: agents are looked up locally (dead)."""
    publish_ray_fleet(layout, state=FleetState.STOPPED)
    doc = status_document(layout)
    assert [(a.alive, a.checked_by) for a in doc.agents] == [(False, LivenessCheck.PROCESS)] * 2
