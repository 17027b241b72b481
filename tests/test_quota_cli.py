"""`loopx goal add` policy validation and `loopx quota show|should-run` (exit codes, JSON)."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from loopx import exitcodes
from loopx.cli import main
from loopx.model import utcnow
from loopx.quota.ledger import SpendRecord, append_spend
from loopx.root import Layout
from loopx.storage.files import atomic_write_model
from loopx.turn.lease import Lease
from loopx.usage import Usage

POLICY = {
    "--quota-compute": ("compute", "0.25"),
    "--quota-window-hours": ("window_hours", "6.5"),
    "--cpu-seconds": ("cpu_seconds", "1200"),
    "--turn-timeout": ("turn_timeout_s", "300"),
    "--max-rss-mb": ("max_rss_mb", "2048"),
    "--min-free-memory-mb": ("min_free_memory_mb", "512"),
    "--max-load-per-cpu": ("max_load_per_cpu", "1.5"),
    "--max-tokens": ("max_tokens", "100000"),
    "--max-cost-usd": ("max_cost_usd", "4.75"),
    "--stall-timeout": ("stall_timeout_s", "120"),
}


def loopx(root: Path, *argv: str) -> int:
    return main(["--root", str(root), *argv])


def json_of(capsys, root: Path, *argv: str) -> tuple[int, dict]:
    capsys.readouterr()
    code = loopx(root, *argv, "--json")
    return code, json.loads(capsys.readouterr().out)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "root"
    assert main(["init", "--root", str(path)]) == exitcodes.OK
    return path


def add(root: Path, goal_id: str = "g", *extra: str) -> None:
    assert loopx(root, "goal", "add", goal_id, "--objective", "work", *extra) == exitcodes.OK


# --- goal add: the policy ----------------------------------------------------------------------


def test_every_policy_flag_round_trips_through_goal_show(root, capsys):
    """Each quota flag of `goal add` is stored and shown back as its number."""
    add(root, "g", *[part for flag, (_, value) in POLICY.items() for part in (flag, value)])
    code, view = json_of(capsys, root, "goal", "show", "g")
    assert code == exitcodes.OK
    assert view["goal"]["quota"] == {
        field: (
            int(value)
            if field in {"max_rss_mb", "min_free_memory_mb", "max_tokens"}
            else float(value)
        )
        for field, value in POLICY.values()
    }


def test_update_changes_only_the_named_policy_field(root, capsys):
    """`goal add --update` with one flag keeps every other policy field."""
    add(root, "g", "--quota-compute", "0.5", "--cpu-seconds", "60")
    assert loopx(root, "goal", "add", "g", "--update", "--max-tokens", "9") == exitcodes.OK
    _, view = json_of(capsys, root, "goal", "show", "g")
    quota = view["goal"]["quota"]
    assert (quota["compute"], quota["cpu_seconds"], quota["max_tokens"]) == (0.5, 60.0, 9)


def test_policy_defaults(root, capsys):
    """Without flags a goal gets the documented defaults: full share of a 24 h window."""
    add(root)
    _, view = json_of(capsys, root, "goal", "show", "g")
    quota = view["goal"]["quota"]
    assert (quota["compute"], quota["window_hours"], quota["turn_timeout_s"]) == (1.0, 24.0, 1800.0)


@pytest.mark.parametrize(
    ("flag", "value", "problem"),
    [
        ("--quota-compute", "1.01", "less than or equal to 1"),
        ("--quota-compute", "-0.5", "greater than or equal to 0"),
        ("--quota-compute", "nan", "finite number"),
        ("--quota-window-hours", "0", "greater than 0"),
        ("--quota-window-hours", "inf", "finite number"),
        ("--cpu-seconds", "-1", "greater than 0"),
        ("--turn-timeout", "0", "greater than 0"),
        ("--max-rss-mb", "0", "greater than 0"),
        ("--min-free-memory-mb", "-1", "greater than 0"),
        ("--max-load-per-cpu", "0", "greater than 0"),
        ("--max-tokens", "0", "greater than 0"),
        ("--max-cost-usd", "-2", "greater than 0"),
        ("--max-cost-usd", "inf", "finite number"),
    ],
)
def test_out_of_range_policy_is_refused_naming_the_flag(root, capsys, flag, value, problem):
    """A bad value exits 2 with one line naming the flag, the bound and the value; nothing is stored."""
    code = loopx(root, "goal", "add", "g", "--objective", "o", flag, value)
    err = capsys.readouterr().err
    assert code == exitcodes.USAGE
    assert f"invalid value for {flag}: " in err
    assert problem in err
    assert "got " in err
    assert "Traceback" not in err
    assert loopx(root, "goal", "show", "g") == exitcodes.FAILURE  # not registered


def test_bad_update_leaves_the_stored_policy_alone(root, capsys):
    """A refused --update does not touch the registered policy."""
    add(root, "g", "--quota-compute", "0.3")
    assert loopx(root, "goal", "add", "g", "--update", "--quota-compute", "2") == exitcodes.USAGE
    _, view = json_of(capsys, root, "goal", "show", "g")
    assert view["goal"]["quota"]["compute"] == 0.3


# --- quota should-run / show -------------------------------------------------------------------


def spend_now(root: Path, goal_id: str, seconds: float, *, seq: int = 1) -> None:
    end = utcnow() - timedelta(minutes=1)
    append_spend(
        Layout.at(root),
        SpendRecord(
            turn_key=f"{goal_id}-{seq}",
            goal_id=goal_id,
            seq=seq,
            usage=Usage(
                wall_s=seconds, cpu_s=seconds / 2, input_tokens=7, output_tokens=3, cost_usd=0.5
            ),
            started_at=end - timedelta(seconds=seconds),
            ended_at=end,
        ),
    )


def test_should_run_exits_0_when_allowed(root, capsys):
    """A fresh goal may run: exit 0 and an `ok` decision."""
    add(root)
    code, decision = json_of(capsys, root, "quota", "should-run", "g")
    assert (code, decision["allowed"], decision["reason"]) == (exitcodes.OK, True, "ok")


def test_should_run_exits_3_when_the_window_is_spent(root, capsys):
    """Spend past the allowance: exit 3, reason and next eligible time in the JSON."""
    add(root, "g", "--quota-compute", "0.01", "--quota-window-hours", "1")  # 36 s
    spend_now(root, "g", 40)
    code, decision = json_of(capsys, root, "quota", "should-run", "g")
    assert (code, decision["reason"], decision["spent_wall_s"]) == (
        exitcodes.NOT_ALLOWED,
        "window_exhausted",
        40.0,
    )
    assert decision["next_eligible_at"] is not None


def test_should_run_reports_a_live_lease(root, capsys):
    """A lease that has not expired makes the goal `leased`."""
    add(root)
    now = utcnow()
    atomic_write_model(
        Layout.at(root).lease_file("g"),
        Lease(
            goal_id="g",
            agent_id="a1",
            pid=1,
            pid_started_at=0.0,
            hostname="h",
            epoch=1,
            acquired_at=now,
            renewed_at=now,
            expires_at=now + timedelta(minutes=5),
        ),
    )
    code, decision = json_of(capsys, root, "quota", "should-run", "g")
    assert (code, decision["reason"]) == (exitcodes.NOT_ALLOWED, "leased")


def test_should_run_text_says_why(root, capsys):
    """Without --json, one line says no, the reason and the sentence."""
    add(root)
    assert loopx(root, "goal", "pause", "g") == exitcodes.OK
    capsys.readouterr()
    assert loopx(root, "quota", "should-run", "g") == exitcodes.NOT_ALLOWED
    assert capsys.readouterr().out.startswith("no (paused): goal g is paused")


def test_should_run_of_an_unknown_goal_is_an_error_not_a_refusal(root, capsys):
    """A missing goal exits 1 (failure), distinct from 3 (not allowed)."""
    add(root)
    assert loopx(root, "quota", "should-run", "nope") == exitcodes.FAILURE
    assert "not in the registry" in capsys.readouterr().err


def test_should_run_exit_code_reaches_the_shell(root):
    """The installed `loopx` script exits 3 for a paused goal, so shell scripts can branch on it."""
    add(root, "g", "--quota-compute", "0")
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "from loopx.cli import run; run()",
            "--root",
            str(root),
            "quota",
            "should-run",
            "g",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (proc.returncode, proc.stdout.split(":")[0]) == (exitcodes.NOT_ALLOWED, "no (paused)")


def test_quota_show_json_has_policy_window_spend_remaining_and_decision(root, capsys):
    """`quota show --json` reports the window's spend and what is left of each cap."""
    add(root, "g", "--quota-window-hours", "2", "--cpu-seconds", "100", "--max-tokens", "50")
    spend_now(root, "g", 30)
    code, report = json_of(capsys, root, "quota", "show", "g")
    assert code == exitcodes.OK
    assert set(report) == {
        "schema_version",
        "goal_id",
        "policy",
        "window_start",
        "window_end",
        "spend",
        "lifetime",
        "remaining",
        "decision",
    }
    assert report["spend"] == {
        "wall_s": 30.0,
        "cpu_s": 15.0,
        "tokens": 10,
        "cost_usd": 0.5,
        "turns": 1,
    }
    assert report["remaining"] == {"wall_s": 7170.0, "cpu_s": 85.0, "tokens": 40, "cost_usd": None}
    assert (report["decision"]["allowed"], report["policy"]["cpu_seconds"]) == (True, 100.0)


def test_quota_show_text_exits_0_even_when_not_allowed(root, capsys):
    """`quota show` reports; only `should-run` encodes the decision in its exit code."""
    add(root, "g", "--quota-compute", "0.001", "--quota-window-hours", "1")
    spend_now(root, "g", 10)
    capsys.readouterr()
    assert loopx(root, "quota", "show", "g") == exitcodes.OK
    out = capsys.readouterr().out
    assert "NOT ALLOWED (window_exhausted)" in out
    assert "next eligible at" in out


@pytest.mark.parametrize(
    "name",
    [
        "quota-decision",
        "quota-report",
        "quota-aggregate",
        "spend-record",
        "host-headroom",
    ],
)
def test_quota_schemas_are_printable(root, capsys, name):
    """`loopx schema NAME` prints each quota file kind's JSON Schema."""
    capsys.readouterr()
    assert main(["schema", name]) == exitcodes.OK
    assert "properties" in json.loads(capsys.readouterr().out)
