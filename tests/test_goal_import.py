"""`loopx goal import FILE`: many goals at once, checked whole, idempotent."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from loopx.registry.goal_index import GoalIndex, built_goals, fingerprints_of
from tests.conftest import Cli


@pytest.fixture
def cli(cli: Cli) -> Cli:
    """What commands print and decide is the point here: the CLI runs in this process."""
    return cli.in_process()


def write_lines(path: Path, entries: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(e) + "\n" for e in entries))
    return path


def test_import_registers_every_line_and_is_idempotent(cli: Cli, tmp_path: Path) -> None:
    """Every line becomes a goal; importing the same file again adds nothing."""
    entries = [{"id": f"g{i}", "objective": f"o{i}", "priority": i} for i in range(5)]
    source = write_lines(tmp_path / "goals.jsonl", entries)
    first = cli.json("goal", "import", str(source))
    assert (first["total"], first["added"], first["unchanged"]) == (5, 5, 0)
    again = cli.json("goal", "import", str(source))
    assert (again["added"], again["unchanged"]) == (0, 5)
    listed = {g["id"]: g["priority"] for g in cli.json("goal", "list")["goals"]}
    assert listed == {f"g{i}": i for i in range(5)}


def test_goal_list_output_round_trips(cli: Cli, tmp_path: Path) -> None:
    """`goal list --json` entries, one per line, import into another root as the same goals."""
    cli.run("goal", "add", "a", "--objective", "x", "--priority", "3", check=True)
    cli.run("goal", "add", "b", "--objective", "y", "--quota-compute", "0.5", check=True)
    listed = cli.json("goal", "list")["goals"]
    source = write_lines(tmp_path / "export.jsonl", listed)
    other = Cli(tmp_path / "other", cli.cwd, here=True)
    other.run("init", check=True)
    assert other.json("goal", "import", str(source))["added"] == 2
    assert other.json("goal", "list")["goals"] == listed


def test_a_bad_line_is_named_and_nothing_is_written(cli: Cli, tmp_path: Path) -> None:
    """One invalid line fails the whole import with its line number; no goal is registered."""
    source = tmp_path / "goals.jsonl"
    source.write_text(
        '{"id": "ok", "objective": "x"}\n{"id": "bad", "objective": "y", "priority": "high"}\n'
    )
    proc = cli.run("goal", "import", str(source))
    assert proc.returncode != 0
    assert f"{source}:2" in proc.stderr and "priority" in proc.stderr
    assert cli.json("goal", "list")["goals"] == []


def test_duplicates_and_conflicts_are_errors(cli: Cli, tmp_path: Path) -> None:
    """An id twice in the file, or a registered goal with another policy, names its line."""
    twice = write_lines(
        tmp_path / "twice.jsonl", [{"id": "a", "objective": "x"}, {"id": "a", "objective": "x"}]
    )
    proc = cli.run("goal", "import", str(twice))
    assert proc.returncode != 0 and "given twice (first on line 1)" in proc.stderr
    cli.run("goal", "add", "a", "--objective", "x", check=True)
    clash = write_lines(
        tmp_path / "clash.jsonl", [{"id": "new", "objective": "n"}, {"id": "a", "objective": "z"}]
    )
    proc = cli.run("goal", "import", str(clash))
    assert (
        proc.returncode != 0 and f"{clash}:2" in proc.stderr and "different policy" in proc.stderr
    )
    assert [g["id"] for g in cli.json("goal", "list")["goals"]] == ["a"]


def test_a_batch_plan_imports_too(cli: Cli, tmp_path: Path) -> None:
    """A TOML batch plan registers its goals, workdirs relative to the plan."""
    plan = tmp_path / "plan.toml"
    (tmp_path / "w1").mkdir()
    plan.write_text('[[goals]]\nid = "p1"\nobjective = "one"\nworkdir = "w1"\nhost_kind = "demo"\n')
    assert cli.json("goal", "import", str(plan))["added"] == 1
    (goal,) = cli.json("goal", "list")["goals"]
    assert (goal["id"], goal["workdir"]) == ("p1", str((tmp_path / "w1").resolve()))


def test_a_host_kind_no_adapter_runs_is_refused_even_without_checks(
    cli: Cli, tmp_path: Path
) -> None:
    """A host kind typo names its line and registers nothing, --no-check or not (as `goal add`)."""
    good = {"id": "ok", "objective": "x", "workdir": str(tmp_path)}
    typo = {**good, "id": "typo", "host": {"kind": "codx"}}
    source = write_lines(tmp_path / "goals.jsonl", [good, typo])
    for extra in ((), ("--no-check",)):
        proc = cli.run("goal", "import", *extra, str(source))
        assert proc.returncode == 2, proc.stderr
        assert f"{source}:2: no host adapter for host kind 'codx'" in proc.stderr
    assert cli.json("goal", "list")["goals"] == []


def test_a_missing_workdir_or_program_names_its_line(cli: Cli, tmp_path: Path) -> None:
    """`goal add`'s checks run for every line; the first at fault is named, nothing is written."""
    work = tmp_path / "work"
    work.mkdir()
    script = work / "host.sh"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    good = {"id": "ok", "objective": "x", "workdir": str(work)}
    rel = {**good, "id": "rel", "host": {"kind": "command", "argv": ["./host.sh"]}}
    gone = {"id": "gone", "objective": "y", "workdir": str(tmp_path / "nowhere")}
    source = write_lines(tmp_path / "goals.jsonl", [good, rel, gone])
    proc = cli.run("goal", "import", str(source))
    assert proc.returncode != 0
    assert f"{source}:3" in proc.stderr and "does not exist" in proc.stderr
    assert "mkdir -p" in proc.stderr  # the check's own hint
    nohost = {**good, "id": "nohost", "host": {"kind": "command", "argv": ["no-such-prog-x"]}}
    source = write_lines(tmp_path / "goals.jsonl", [good, rel, nohost])
    proc = cli.run("goal", "import", str(source))
    assert proc.returncode != 0
    assert f"{source}:3" in proc.stderr and "not found on PATH" in proc.stderr
    assert cli.json("goal", "list")["goals"] == []
    # --no-check registers them as they are, like `goal add --no-check`.
    assert cli.json("goal", "import", "--no-check", str(source))["added"] == 3


def test_import_leaves_the_goal_index_current(cli: Cli, tmp_path: Path) -> None:
    """The goal index holds every imported goal with its file's fingerprint when import ends.

    So the next command loads the index instead of parsing every new goal file.
    """
    source = write_lines(
        tmp_path / "goals.jsonl", [{"id": f"g{i}", "objective": "o"} for i in range(3)]
    )
    assert cli.json("goal", "import", str(source))["added"] == 3
    path = cli.root / "projections" / "goals.json"
    index = GoalIndex.model_validate_json(path.read_bytes())
    assert sorted(index.goals) == ["g0", "g1", "g2"]
    for goal_id, entry in index.goals.items():
        st = os.stat(cli.root / "goals" / goal_id / "goal.json")
        assert entry[:3] == (st.st_ino, st.st_mtime_ns, st.st_size)
    assert fingerprints_of(index, path) == {g: e[:3] for g, e in index.goals.items()}
    assert {g.objective for g in built_goals(index).values()} == {"o"}


def test_an_import_killed_before_the_link_leaves_a_temp_the_next_import_removes(
    cli: Cli, tmp_path: Path
) -> None:
    """Killed between temp file and link (LOOPX_FAULT): the next import finishes and cleans up."""
    import subprocess
    import sys

    from tests.turnkit import cli_env

    source = write_lines(tmp_path / "goals.jsonl", [{"id": "g1", "objective": "o"}])
    killed = subprocess.run(
        [sys.executable, "-m", "loopx", "--root", str(cli.root), "goal", "import", str(source)],
        env=cli_env(LOOPX_FAULT="goal_import:before_link"),
        capture_output=True,
        check=False,
    )
    assert killed.returncode == 137
    goal_dir = cli.root / "goals" / "g1"
    assert [p.name for p in goal_dir.glob(".goal.json.*.tmp")], "the temp file was left"
    again = cli.json("goal", "import", str(source))
    assert again["added"] == 1
    assert list(goal_dir.glob(".goal.json.*.tmp")) == []
