"""Exit codes: within one command no two outcomes share a code.

`batch run` and `supervisor run --until-idle` end as: every goal done (0), a
goal failed (1), a usage error (2), or a human is needed (4). The needs-human
and failure cases run real fleets in test_batch.py and test_supervisor_turns.py;
here: the codes are distinct, and a mistyped flag is a usage error, not a verdict.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from loopx import exitcodes
from loopx.batch.report import GoalReport, Outcome, exit_code_for
from tests.turnkit import cli_env

NAMED = {name: getattr(exitcodes, name) for name in dir(exitcodes) if name.isupper()}


def test_every_named_code_is_distinct() -> None:
    """No two names in loopx.exitcodes share a number."""
    assert len(set(NAMED.values())) == len(NAMED)


def test_usage_and_needs_human_differ() -> None:
    """A CI script can tell a mistyped flag from a goal waiting for a human."""
    assert exitcodes.USAGE != exitcodes.NEEDS_HUMAN


def _goal(outcome: Outcome) -> GoalReport:
    return GoalReport(
        goal_id=str(outcome),
        outcome=outcome,
        turns=1,
        committed_turns=1,
        cpu_s=0.0,
        wall_s=0.0,
        peak_rss_mb=0.0,
        tokens=0,
        cost_usd=0.0,
    )


@pytest.mark.parametrize(
    ("outcomes", "code"),
    [
        ([Outcome.COMPLETED], exitcodes.OK),
        ([Outcome.COMPLETED, Outcome.NEEDS_HUMAN], exitcodes.NEEDS_HUMAN),
        ([Outcome.NEEDS_HUMAN, Outcome.FAILED], exitcodes.FAILURE),
        ([Outcome.UNFINISHED], exitcodes.FAILURE),
    ],
)
def test_batch_report_code_is_named(outcomes: list[Outcome], code: int) -> None:
    """The batch report's exit code is one of the named codes, never USAGE."""
    assert exit_code_for([_goal(o) for o in outcomes]) == code


def _loopx(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "loopx", "--root", str(root), *args],
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=60,
        check=False,
    )


@pytest.fixture
def plan(tmp_path: Path) -> Path:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({"goals": [{"id": "a", "objective": "x", "host_kind": "demo"}]}))
    return path


@pytest.mark.parametrize(
    "args",
    [("--agnets", "2"), ("--agents", "0"), ("--agents", "two")],
    ids=["mistyped-flag", "no-agents", "not-a-number"],
)
def test_batch_run_usage_error_is_usage(tmp_path: Path, plan: Path, args: tuple[str, ...]) -> None:
    """`batch run` with a bad flag exits USAGE and registers nothing."""
    proc = _loopx(tmp_path / "root", "batch", "run", str(plan), *args)
    assert proc.returncode == exitcodes.USAGE, proc.stderr
    assert not (tmp_path / "root" / "registry.json").exists()


@pytest.mark.parametrize(
    "args",
    [("--until-idle", "--agnets", "2"), ("--until-idle", "--agents", "-1")],
    ids=["mistyped-flag", "negative-agents"],
)
def test_until_idle_usage_error_is_usage(tmp_path: Path, args: tuple[str, ...]) -> None:
    """`supervisor run --until-idle` with a bad flag exits USAGE before any fleet starts."""
    proc = _loopx(tmp_path / "root", "supervisor", "run", *args)
    assert proc.returncode == exitcodes.USAGE, proc.stderr
    assert not (tmp_path / "root" / "supervisor.json").exists()
