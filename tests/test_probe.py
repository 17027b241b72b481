"""`loopx probe`: run next_probe read-only and record it in the status projection only."""

from __future__ import annotations

import pytest

from loopx.errors import GoalStateError
from loopx.model import utcnow
from loopx.status.cache import StatusCache
from loopx.status.nextprobe import run_probe
from loopx.testing.status_fixtures import make_goal, register_goals
from tests.conftest import Cli


@pytest.fixture
def cli(cli: Cli) -> Cli:
    """What commands print and decide is the point here: the CLI runs in this process."""
    return cli.in_process()


def probe_goal(layout, tmp_path, command: str | None):
    workdir = tmp_path / "work"
    workdir.mkdir(exist_ok=True)
    goal = make_goal("g1", now=utcnow(), workdir=workdir, next_probe=command)
    register_goals(layout, [goal])
    return goal


def test_probe_runs_read_only_in_the_workdir(layout, tmp_path):
    """The probe runs in the workdir with LOOPX_READ_ONLY=1 and its output is recorded."""
    goal = probe_goal(layout, tmp_path, 'echo "$LOOPX_READ_ONLY $(pwd)"; echo oops >&2; exit 3')
    obs = run_probe(layout, goal, now=utcnow())
    assert (obs.exit_code, obs.timed_out) == (3, False)
    assert obs.stdout == f"1 {tmp_path / 'work'}\n"
    assert obs.stderr == "oops\n"


def test_observation_is_in_status_not_state(layout, tmp_path):
    """The observation shows in the status projection; state.json is untouched."""
    goal = probe_goal(layout, tmp_path, "echo 42 tests pass")
    state_before = (
        layout.state_file("g1").read_bytes() if layout.state_file("g1").exists() else None
    )
    cache = StatusCache(layout)
    cache.refresh(now=utcnow(), ttl_s=0)
    run_probe(layout, goal, now=utcnow())
    cache.refresh(now=utcnow(), ttl_s=0)
    assert cache.goals["g1"].view.probe.stdout == "42 tests pass\n"
    after = layout.state_file("g1").read_bytes() if layout.state_file("g1").exists() else None
    assert after == state_before


def test_probe_is_killed_at_the_deadline(layout, tmp_path):
    """A probe past its timeout is killed with its process group and marked timed out."""
    goal = probe_goal(layout, tmp_path, "sleep 30 & sleep 30")
    obs = run_probe(layout, goal, now=utcnow(), timeout_s=0.5)
    assert (obs.timed_out, obs.exit_code) == (True, None)
    assert obs.duration_s < 20


def test_probe_output_is_bounded(layout, tmp_path):
    """Output past the byte limit is cut and flagged."""
    goal = probe_goal(layout, tmp_path, "yes x | head -c 100000")
    obs = run_probe(layout, goal, now=utcnow(), max_bytes=1000)
    assert (len(obs.stdout), obs.truncated) == (1000, True)


def test_goal_without_probe_is_an_error(layout, tmp_path):
    """A goal without next_probe is refused with a hint."""
    goal = probe_goal(layout, tmp_path, None)
    with pytest.raises(GoalStateError, match="no next_probe"):
        run_probe(layout, goal, now=utcnow())


def test_probe_cli_json(layout, tmp_path, cli):
    """`loopx probe GOAL --json` prints the observation."""
    probe_goal(layout, tmp_path, "echo hi")
    doc = cli.json("probe", "g1")
    assert (doc["stdout"], doc["exit_code"], doc["goal_id"]) == ("hi\n", 0, "g1")


def test_the_api_defaults_are_the_probe_defaults() -> None:
    """`loopx probe`'s defaults are spelled in the API too, so `goal add` does not import probing."""
    from loopx.api import Goals
    from loopx.status.nextprobe import DEFAULT_MAX_BYTES, DEFAULT_TIMEOUT_S

    assert (Goals.PROBE_TIMEOUT_S, Goals.PROBE_MAX_BYTES) == (DEFAULT_TIMEOUT_S, DEFAULT_MAX_BYTES)
