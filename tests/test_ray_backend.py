"""The Ray back-end's parts that need no cluster: the missing-ray error, resource profiles, goal resources."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from loopx.agents.loop import fits
from loopx.registry.model import Goal, GoalStatus, Registry
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
