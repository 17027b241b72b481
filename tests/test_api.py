"""The Python API: the same root, results and errors as the CLI; threads; a stable surface."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import pytest

import loopx
from loopx.agents.hosts import DemoHost
from loopx.agents.hosts.base import HostInvocation
from loopx.registry.goalrecords import Goal
from loopx.root import Layout
from loopx.turn.protocol import Envelope
from tests.conftest import Cli


@pytest.fixture
def cli(cli: Cli) -> Cli:
    """What commands print and decide is the point here: the CLI runs in this process."""
    return cli.in_process()


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


def test_schema_is_what_loopx_schema_prints(cli: Cli) -> None:
    """``Root.schema(name)`` is the document `loopx schema NAME` prints; an unknown name is refused."""
    printed = json.loads(cli.run("schema", "goal-view", check=True).stdout)
    assert printed == loopx.Root.schema("goal-view")
    with pytest.raises(loopx.UsageError, match="unknown schema 'nope'") as unknown:
        loopx.Root.schema("nope")
    assert unknown.value.message in cli.run("schema", "nope", check=False).stderr


def test_a_served_root_answers_until_stopped(tmp_path: Path) -> None:
    """``root.serve(port=0)`` binds a free port, answers /healthz while started, closes on stop."""
    root = loopx.Root.open(tmp_path / "r", create=True)
    root.goals.add("g", objective="o", workdir=tmp_path)
    server = root.serve(port=0).start()
    try:
        host, port = server.address
        assert host == "127.0.0.1" and port > 0
        ask = urllib.request.Request(f"{server.url}healthz", headers=server.auth_headers)
        with urllib.request.urlopen(ask, timeout=30) as reply:
            assert json.load(reply)["goals"] == 1
        assert server.token and server.page_url.endswith(f"#token={server.token}")
    finally:
        server.stop()
    assert server.wait(0)
    with pytest.raises(OSError), socket.create_connection((host, port), timeout=5):
        pass


def test_an_open_bind_without_a_token_is_refused(tmp_path: Path) -> None:
    """The API refuses what `loopx serve` refuses, before binding."""
    root = loopx.Root.open(tmp_path / "r", create=True)
    with pytest.raises(loopx.UsageError, match=r"0\.0\.0\.0"):
        root.serve(host="0.0.0.0", port=0, no_token=True)


def test_a_foreground_run_in_a_child_returns_the_run_summary(tmp_path: Path) -> None:
    """``fleet.run(child=True, until_idle=True)`` runs the goal to done and returns its summary."""
    root = loopx.Root.open(tmp_path / "r", create=True)
    root.goals.add("g", objective="o", workdir=tmp_path, host_kind="demo", host=["--steps", "2"])
    summary = root.fleet.run(agents=1, until_idle=True, child=True)
    assert (summary.exit_code, summary.turns, summary.goals["completed"]) == (0, 2, 1)
    assert summary.root == str(root.path)


def test_run_options_are_refused_as_the_cli_refuses_them(tmp_path: Path) -> None:
    """A Ray-only option on local agents is the CLI's UsageError, raised before anything runs."""
    root = loopx.Root.open(tmp_path / "r", create=True)
    with pytest.raises(loopx.UsageError, match="Ray back-end only"):
        root.fleet.run(ray_address="auto", child=True)
    with pytest.raises(loopx.UsageError, match="--visible must be one of none, tmux"):
        root.fleet.start(visible="window")
    assert root.fleet.status().supervisor is None


def test_attach_without_a_supervisor_is_refused(tmp_path: Path) -> None:
    """``attach_command()`` raises the error `supervisor attach` prints."""
    root = loopx.Root.open(tmp_path / "r", create=True)
    with pytest.raises(loopx.LoopxError, match="no supervisor is running") as refused:
        root.fleet.attach_command()
    done = subprocess.run(
        [sys.executable, "-m", "loopx", "--root", str(root.path), "supervisor", "attach"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert refused.value.message in done.stderr


def test_an_agent_loop_runs_once_from_python(tmp_path: Path) -> None:
    """``fleet.run_agent(once=True)`` takes one turn and returns exit code 0 (in its own process)."""
    root = loopx.Root.open(tmp_path / "r", create=True)
    root.goals.add("g", objective="o", workdir=tmp_path, host_kind="demo", host=["--steps", "3"])
    code = (
        "import sys, loopx; root = loopx.Root.open(sys.argv[1]); "
        "sys.exit(root.fleet.run_agent(agent_id='py', once=True))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(root.path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert root.goals.show("g").state.turn_seq == 1


def test_the_agent_process_and_agent_run_accept_what_the_supervisor_passes(
    layout: Layout,
) -> None:
    """The supervisor's agent command line parses, to the same values, in both agent entries."""
    from loopx.agents.__main__ import build_parser as agent_parser
    from loopx.agents.__main__ import config_of
    from loopx.cli._app import build_parser as cli_parser
    from loopx.supervisor.runner import AgentSpec, LocalRunner

    spec = AgentSpec(heartbeat_s=0.5, idle_max_s=1.5, max_turns=3, log_level="debug")
    argv = LocalRunner(layout, spec, env={}).argv("a1")
    assert argv[2:5] == ["-m", "loopx.agents", "run"]
    process = agent_parser().parse_args(argv[4:])
    config = config_of(process)
    assert (config.agent_id, config.heartbeat_s, config.idle_max_s, config.max_turns) == (
        "a1",
        0.5,
        1.5,
        3,
    )
    assert config.parent_pid == os.getpid()
    in_cli = cli_parser(["agent", "run"]).parse_args(["agent", "run", *argv[5:]])
    shared = vars(process).keys() - {"command"}
    assert {k: vars(in_cli)[k] for k in shared} == {k: vars(process)[k] for k in shared}
