"""The goal CLI: every policy field round-trips, bad input is one line, bad files are kept."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import Cli


@pytest.fixture
def cli(cli: Cli) -> Cli:
    """What commands print and decide is the point here: the CLI runs in this process."""
    return cli.in_process()


def test_init_creates_a_private_root_and_registry(tmp_path: Path) -> None:
    """`loopx init` makes the root and an empty registry; running it again changes nothing."""
    cli = Cli(tmp_path / "fresh", tmp_path, here=True)
    first = cli.json("init")
    assert first["registry_created"] is True
    assert cli.json("init")["registry_created"] is False
    settings = json.loads((cli.root / "registry.json").read_text())
    assert settings == {"schema_version": 2, "common_runtime_root": None, "sandbox": None}
    assert cli.json("goal", "list")["goals"] == []


def test_every_policy_field_round_trips(cli: Cli, tmp_path: Path) -> None:
    """What `goal add` is given is exactly what `goal show --json` returns."""
    work = tmp_path / "w"
    work.mkdir()
    cli.run(
        "goal",
        "add",
        "g1",
        "--objective",
        "ship it",
        "--workdir",
        str(work),
        "--host",
        "my-agent --flag 'two words'",
        "--no-check",
        "--priority",
        "7",
        "--quota-compute",
        "0.25",
        "--quota-window-hours",
        "12",
        "--cpu-seconds",
        "300",
        "--turn-timeout",
        "90",
        "--stall-timeout",
        "45",
        "--max-rss-mb",
        "512",
        "--min-free-memory-mb",
        "256",
        "--max-load-per-cpu",
        "1.5",
        "--max-tokens",
        "10000",
        "--max-cost-usd",
        "2.5",
        "--next-probe",
        "git log -1",
        "--max-host-attempts",
        "3",
        check=True,
    )
    goal = cli.json("goal", "show", "g1")["goal"]
    assert goal["objective"] == "ship it"
    assert goal["workdir"] == str(work.resolve())
    assert goal["host"] == {
        "kind": "command",
        "argv": ["my-agent", "--flag", "two words"],
        "session_max_turns": None,
        "unreachable_after_s": None,
    }
    assert goal["priority"] == 7
    assert goal["next_probe"] == "git log -1"
    assert goal["max_host_attempts"] == 3
    assert goal["quota"] == {
        "compute": 0.25,
        "window_hours": 12.0,
        "cpu_seconds": 300.0,
        "turn_timeout_s": 90.0,
        "stall_timeout_s": 45.0,
        "max_rss_mb": 512,
        "min_free_memory_mb": 256,
        "max_load_per_cpu": 1.5,
        "max_tokens": 10000,
        "max_cost_usd": 2.5,
    }


def test_update_changes_only_the_named_fields(cli: Cli) -> None:
    """`--update` keeps every field it was not given."""
    cli.run(
        "goal",
        "add",
        "g",
        "--objective",
        "a",
        "--priority",
        "2",
        "--quota-compute",
        "0.5",
        check=True,
    )
    dup = cli.run("goal", "add", "g", "--objective", "b")
    assert dup.returncode == 1
    assert "already exists" in dup.stderr
    assert "--update" in dup.stderr
    cli.run("goal", "add", "g", "--update", "--priority", "5", check=True)
    goal = cli.json("goal", "show", "g")["goal"]
    assert (goal["objective"], goal["priority"], goal["quota"]["compute"]) == ("a", 5, 0.5)


def test_status_changes_and_gates(cli: Cli) -> None:
    """pause/resume/done set the status; a gate opens and resolves with its answer."""
    cli.run("goal", "add", "g", "--objective", "a", check=True)
    assert cli.json("goal", "pause", "g")["goal"]["status"] == "paused"
    assert cli.json("goal", "resume", "g")["goal"]["status"] == "active"
    gate = cli.json("gate", "open", "g", "--question", "which db?")["gate"]
    assert gate["answer"] is None
    resolved = cli.json("gate", "resolve", "g", "--answer", "postgres")["gate"]
    assert (resolved["id"], resolved["answer"]) == (gate["id"], "postgres")
    assert cli.run("gate", "resolve", "g", "--answer", "again").returncode == 1
    assert cli.json("goal", "done", "g")["goal"]["status"] == "done"


def test_user_errors_are_one_line_with_a_hint_and_no_traceback(cli: Cli) -> None:
    """Bad ids and values exit 2, unknown goals exit 1; none prints a traceback."""
    cases = [
        (("goal", "add", "../x", "--objective", "a"), 2),
        (("goal", "add", "g", "--objective", "a", "--quota-compute", "1.5"), 2),
        (("goal", "add", "g", "--objective", "a", "--quota-window-hours", "0"), 2),
        (("goal", "show", "nope"), 1),
        (("schema", "nope"), 2),
    ]
    for args, code in cases:
        proc = cli.run(*args)
        assert proc.returncode == code, (args, proc.stderr)
        assert "Traceback" not in proc.stderr
        assert proc.stderr.startswith("loopx: error: ")
        assert "hint: " in proc.stderr


def test_a_damaged_registry_is_reported_and_never_overwritten(cli: Cli) -> None:
    """A registry that is not JSON, or not the schema, is named and left byte for byte."""
    cli = Cli(cli.root, cli.cwd)  # fresh processes: one checks registry.json once
    cli.run("init", check=True)
    registry = cli.root / "registry.json"
    for damage in (
        b"{not json",
        b'{"schema_version": 1, "goals": {"g": {"id": 5}}}',
        b'{"schema_version": 99}',
    ):
        registry.write_bytes(damage)
        proc = cli.run("goal", "add", "g2", "--objective", "x")
        assert proc.returncode == 1
        assert str(registry) in proc.stderr
        assert "Traceback" not in proc.stderr
        assert registry.read_bytes() == damage


def test_a_damaged_state_file_is_reported_and_kept(cli: Cli) -> None:
    """Opening a gate on a goal whose state.json is broken names the file and changes nothing."""
    cli.run("goal", "add", "g", "--objective", "a", check=True)
    state = cli.root / "goals" / "g" / "state.json"
    state.write_bytes(b'{"schema_version": 1, "goal_id": "g", "beliefs": "nope"}')
    proc = cli.run("gate", "open", "g", "--question", "q")
    assert proc.returncode == 1
    assert "state.json" in proc.stderr
    assert "beliefs" in proc.stderr
    assert state.read_bytes() == b'{"schema_version": 1, "goal_id": "g", "beliefs": "nope"}'


def test_schemas_print(cli: Cli) -> None:
    """`loopx schema registry|state` print JSON Schemas carrying schema_version."""
    for name in ("registry", "state"):
        schema = json.loads(cli.run("schema", name, check=True).stdout)
        assert "schema_version" in schema["properties"]


def test_concurrent_goal_adds_lose_nothing(cli: Cli) -> None:
    """Ten processes adding goals at once on one root: all ten are registered."""
    # On 2 cores the imports serialise the processes: ten arrive at the registry lock as
    # densely as twenty did, in half the time.
    cli.run("init", check=True)
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "loopx",
                "--root",
                str(cli.root),
                "goal",
                "add",
                f"g{i}",
                "--objective",
                f"o{i}",
            ],
            cwd=cli.cwd,
            env=cli.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for i in range(10)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0] * 10, [err for _, err in outs]
    goals = cli.json("goal", "list")["goals"]
    assert sorted(g["id"] for g in goals) == sorted(f"g{i}" for i in range(10))
    for i in range(10):
        assert (cli.root / "goals" / f"g{i}" / "state.json").exists()


def test_replay_verify_of_a_goal_without_turns_matches(cli: Cli) -> None:
    """A goal no turn has touched verifies clean (its state's time is not a journal's)."""
    cli.run("goal", "add", "g", "--objective", "o", "--host-kind", "demo", check=True)
    proc = cli.run("replay", "g", "--verify")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "DIFF" not in proc.stdout


def test_status_says_when_a_filter_matches_nothing(cli: Cli) -> None:
    """`status --actor human` with no such goal names the filter, not an empty registry."""
    cli.run("goal", "add", "g", "--objective", "o", "--host-kind", "demo", check=True)
    out = cli.run("status", "--actor", "human", check=True).stdout
    assert "no goal matches the filter (1 goals in all)" in out
