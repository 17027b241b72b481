"""A done-check decides `completed`: a failing one is not done and reaches the next prompt."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from loopx.agents.hosts.prompt import build_prompt
from loopx.turn.protocol import Envelope
from tests.checkkit import check_runs, write_scripts
from tests.turnkit import loopx, loopx_here


def _add(root: Path, wd: Path, *extra: str) -> None:
    host, check = write_scripts(wd)
    added = loopx_here(
        root, "goal", "add", "g", "--objective", "fix the tests", "--workdir", str(wd),
        "--host", host, "--done-check", check, *extra,
    )  # fmt: skip
    assert added.returncode == 0, added.stderr


def _envelopes(wd: Path) -> list[dict]:
    return [json.loads(line) for line in (wd / "envelopes.jsonl").read_text().splitlines()]


def test_a_failing_check_then_a_passing_one(cli, tmp_path):
    """Turn 1 says completed, the check fails: progress; turn 2 fixes it, the check passes: done."""
    wd = tmp_path / "wd"
    _add(cli.root, wd)
    first = loopx(cli.root, "turn", "run-once", "g", "--json")
    assert first.returncode == 0, first.stderr
    show = json.loads(loopx_here(cli.root, "goal", "show", "g", "--json").stdout)
    assert show["goal"]["status"] == "active"
    state = show["state"]
    assert state["next_action"] == "make the done-check pass"
    assert state["last_check"]["passed"] is False
    assert state["last_check"]["exit_code"] == 1
    assert "3 failed" in state["last_check"]["output_tail"]
    run = json.loads((cli.root / "goals" / "g" / "runs" / "1.json").read_text())
    assert run["result"]["kind"] == "progress"
    assert any("3 failed" in e for e in run["result"]["evidence"])

    second = loopx(cli.root, "turn", "run-once", "g", "--json")
    assert second.returncode == 0, second.stderr
    # The second envelope carried the first check's output to the host.
    envelopes = _envelopes(wd)
    assert envelopes[0]["state"]["last_check"] is None
    assert "3 failed" in envelopes[1]["state"]["last_check"]["output_tail"]
    show = json.loads(loopx_here(cli.root, "goal", "show", "g", "--json").stdout)
    assert show["goal"]["status"] == "done"
    assert show["state"]["last_check"]["passed"] is True
    assert show["state"]["next_action"] is None  # the check's request is met
    assert check_runs(wd) == ["g-t000001-e1", "g-t000002-e2"]


def test_the_next_prompt_shows_the_failing_check(cli, tmp_path):
    """Codex, Claude and Gemini prompts are built from the envelope: the check's output is in it."""
    wd = tmp_path / "wd"
    _add(cli.root, wd)
    assert loopx(cli.root, "turn", "run-once", "g").returncode == 0
    assert loopx(cli.root, "turn", "run-once", "g").returncode == 0
    envelope = Envelope.model_validate(_envelopes(wd)[1])
    prompt = build_prompt(envelope)
    assert "## Done-check failed" in prompt
    assert "FAILED test_c" in prompt
    assert "make the done-check pass" in prompt
    assert "## Done-check failed" not in build_prompt(Envelope.model_validate(_envelopes(wd)[0]))


def test_every_turn_runs_the_check_after_progress(cli, tmp_path):
    """--done-check-every-turn records a result after a `progress` turn too."""
    wd = tmp_path / "wd"
    _add(cli.root, wd, "--done-check-every-turn")
    (wd / "host.py").write_text(
        "import json,os,sys\njson.load(sys.stdin)\n"
        "json.dump({'kind':'progress','summary':'s'},open(os.environ['LOOPX_RESULT_FILE'],'w'))\n"
    )
    assert loopx(cli.root, "turn", "run-once", "g").returncode == 0
    show = json.loads(loopx_here(cli.root, "goal", "show", "g", "--json").stdout)
    assert show["state"]["last_check"]["passed"] is False
    assert check_runs(wd) == ["g-t000001-e1"]
    assert show["goal"]["status"] == "active"


def test_a_goal_without_a_check_runs_none(cli, tmp_path):
    """Without --done-check a `completed` is done at once, as before."""
    wd = tmp_path / "wd"
    host, _ = write_scripts(wd)
    args = ["goal", "add", "g", "--objective", "o", "--workdir", str(wd), "--host", host]
    assert loopx_here(cli.root, *args).returncode == 0
    assert loopx(cli.root, "turn", "run-once", "g").returncode == 0
    show = json.loads(loopx_here(cli.root, "goal", "show", "g", "--json").stdout)
    assert (show["goal"]["status"], show["state"]["last_check"]) == ("done", None)
    assert check_runs(wd) == []


def test_a_missing_check_program_registers_nothing(cli, tmp_path):
    """--done-check naming no program: one error line with a hint, exit 2, no goal."""
    wd = tmp_path / "wd"
    host, _ = write_scripts(wd)
    args = ["goal", "add", "g", "--objective", "o", "--workdir", str(wd), "--host", host]
    bad = loopx_here(cli.root, *args, "--done-check", "no-such-checker-xyz --all")
    assert bad.returncode == 2
    assert "done-check program 'no-such-checker-xyz'" in bad.stderr
    assert "--done-check" in bad.stderr
    assert not (cli.root / "goals" / "g").exists()


def test_an_import_with_a_missing_check_program_registers_nothing(cli, tmp_path):
    """goal import checks each done-check program like a host's: exit 2, nothing registered."""
    wd = tmp_path / "wd"
    wd.mkdir()
    line = {"id": "g", "objective": "o", "workdir": str(wd), "done_check": {"argv": ["nope-xyz"]}}
    path = tmp_path / "goals.jsonl"
    path.write_text(json.dumps(line) + "\n")
    bad = loopx_here(cli.root, "goal", "import", str(path))
    assert bad.returncode == 2
    assert "done-check program 'nope-xyz'" in bad.stderr
    assert not (cli.root / "goals" / "g").exists()


def test_a_batch_plan_carries_the_check(cli, tmp_path):
    """A batch plan's done_check, timeout and every-turn flag reach the goal."""
    plan = tmp_path / "plan.toml"
    plan.write_text(
        '[[goals]]\nid = "g"\nobjective = "o"\nworkdir = "."\nhost_kind = "demo"\n'
        f'done_check = "{sys.executable} -c pass"\ndone_check_timeout_s = 30\n'
        "done_check_every_turn = true\n"
    )
    done = loopx_here(cli.root, "goal", "import", str(plan))
    assert done.returncode == 0, done.stderr
    goal = json.loads(loopx_here(cli.root, "goal", "show", "g", "--json").stdout)["goal"]
    assert goal["done_check"] == {
        "argv": [sys.executable, "-c", "pass"],
        "timeout_s": 30.0,
        "every_turn": True,
    }
