"""The Python API: the same root, results and errors as the CLI; threads; a stable surface."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from pathlib import Path

import pytest

import loopx
from loopx.agents.hosts import DemoHost
from loopx.agents.hosts.base import HostInvocation
from loopx.registry.model import Goal
from loopx.turn.protocol import Envelope
from tests.conftest import Cli

SURFACE = Path(__file__).resolve().parent / "api_surface.txt"


def test_the_public_surface_is_the_checked_in_list() -> None:
    """A change to ``loopx.__all__`` is deliberate: update tests/api_surface.txt with it."""
    assert loopx.__all__ == SURFACE.read_text().split()


def test_open_resolves_the_root_as_the_cli_does(tmp_path: Path) -> None:
    """``path``, else ``$LOOPX_ROOT``; a missing root is a RootError without ``create``."""
    env = {"LOOPX_ROOT": str(tmp_path / "from-env")}
    with pytest.raises(loopx.RootError, match="does not exist"):
        loopx.Root.open(env=env, home=tmp_path)
    assert loopx.Root.open(env=env, home=tmp_path, create=True).path == tmp_path / "from-env"
    flagged = loopx.Root.open(tmp_path / "flag", create=True, env=env, home=tmp_path)
    assert flagged.path == tmp_path / "flag"
    default = loopx.Root.open(env={}, home=tmp_path, create=True)
    assert default.path == tmp_path / ".local" / "state" / "loopx"


def test_results_are_the_cli_json_documents(cli: Cli, tmp_path: Path) -> None:
    """What the API returns is, field for field, what `--json` prints."""
    root = loopx.Root.open(cli.root, create=True)
    now = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    added = root.goals.add("g", objective="o", workdir=tmp_path, priority=3, now=now)
    assert added.goal.created_at == now
    assert cli.json("goal", "show", "g") == root.goals.show("g").model_dump(mode="json")
    assert cli.json("goal", "list") == root.goals.list().model_dump(mode="json")
    gate = root.gates.open("g", question="why?", now=now)
    assert cli.json("goal", "show", "g")["state"]["gates"][0]["id"] == gate.gate.id
    decision = root.quota.should_run("g", now=now)
    assert decision.allowed is False  # the open gate
    with pytest.raises(loopx.GoalNotFoundError) as missing:
        root.goals.pause("nope")
    assert missing.value.message in cli.run("goal", "pause", "nope", check=False).stderr


def test_a_policy_error_names_the_field(tmp_path: Path) -> None:
    """The API names QuotaPolicy fields (the CLI maps them to its flags)."""
    root = loopx.Root.open(tmp_path / "r", create=True)
    with pytest.raises(loopx.InvalidPolicyError) as bad:
        root.goals.add("g", objective="o", workdir=tmp_path, quota={"compute": 2.0})
    assert bad.value.field == "quota.compute"


class CountingHost(DemoHost):
    """The demo host without the goal's switches, counting the turns it prepares."""

    def __init__(self) -> None:
        self.prepared: list[str] = []

    def prepare(self, goal: Goal, envelope: Envelope) -> HostInvocation:
        """Count, then do what the demo host does."""
        self.prepared.append(envelope.turn_key)
        plain = goal.model_copy(update={"host": goal.host.model_copy(update={"argv": []})})
        return super().prepare(plain, envelope)


def test_a_turn_runs_with_a_host_adapter_object(tmp_path: Path) -> None:
    """``run_one(host=...)`` uses the given adapter, not the one of the goal's host kind."""
    root = loopx.Root.open(tmp_path / "r", create=True)
    # The registered demo adapter would pass --fail; the adapter object drops it.
    root.goals.add("g", objective="o", workdir=tmp_path, host_kind="demo", host=["--fail"])
    host = CountingHost()
    attempt = root.turns.run_one("g", host=host)
    assert attempt.report is not None
    assert attempt.report.status == "committed"
    assert host.prepared == [attempt.report.turn_key]
    assert root.turns.replay("g", verify=True).clean


def test_two_threads_add_different_goals_on_one_root(tmp_path: Path) -> None:
    """Both goals are registered: writes take the registry lock, nothing is lost."""
    root = loopx.Root.open(tmp_path / "r", create=True)
    ids = [f"goal-{n}" for n in range(8)]
    errors: list[BaseException] = []

    def add(mine: list[str]) -> None:
        try:
            for goal_id in mine:
                root.goals.add(goal_id, objective=goal_id, workdir=tmp_path)
        except BaseException as e:  # noqa: BLE001 - reported by the assertion below
            errors.append(e)

    threads = [threading.Thread(target=add, args=(ids[i::2],)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert errors == []
    assert sorted(g.id for g in root.goals.list().goals) == ids


def test_a_fleet_run_stops_when_asked_from_another_thread(tmp_path: Path) -> None:
    """Setting ``stop`` ends ``run_until_idle`` with a report, a hanging host notwithstanding."""
    root = loopx.Root.open(tmp_path / "r", create=True)
    root.goals.add(
        "slow", objective="o", workdir=tmp_path, host_kind="demo", host=["--hang", "600"]
    )
    stop = threading.Event()
    seen: list[int] = []

    def progress(p: object) -> None:
        seen.append(1)
        stop.set()

    report = root.fleet.run_until_idle(agents=1, progress=progress, stop=stop)
    assert seen
    assert [g.goal_id for g in report.goals] == ["slow"]
    assert report.goals[0].outcome != "completed"
