"""A crash around parking an account converges, and nothing runs before the reset.

The turn of g1 meets the usage limit of account ``plan`` (the fake codex reads
the provider's limit from a file the account's environment names) and its
process dies at a fault point: before or after the account's update, or
between the turn's phases. After `loopx recover` the account is parked as in
an undisturbed run, and neither goal of the account starts a turn before the
reset.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from loopx.testing import install_fake_host
from tests.fleet_helpers import cli

pytestmark = pytest.mark.timeout(240)

POINTS = [
    "account:before_update",  # the host's outcome known, nothing of it recorded yet
    "account:after_update",  # the account parked, the journal not yet told
    "after:durable_writeback",
    "before:scheduler_apply",
    "after:scheduler_apply",
    "before:scheduler_ack",
]


def _root(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    root = tmp_path / "root"
    bin_dir = tmp_path / "bin"
    install_fake_host(bin_dir, "codex")
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "FAKE_CODEX_HOME": str(tmp_path / "ch"), "TZ": "UTC"}
    assert cli(root, "init", **env).returncode == 0
    limit = tmp_path / "limit"
    limit.write_text((datetime.now(UTC) + timedelta(minutes=2)).isoformat())
    added = cli(root, "account", "add", "plan", "--host-kind", "codex", "--env",
                f"FAKE_CODEX_LIMIT_FILE={limit}", **env)  # fmt: skip
    assert added.returncode == 0, added.stderr
    for goal_id in ("g1", "g2"):
        work = tmp_path / f"w-{goal_id}"
        work.mkdir()
        done = cli(root, "goal", "add", goal_id, "--objective", "x", "--workdir", str(work),
                   "--host-kind", "codex", "--account", "plan", **env)  # fmt: skip
        assert done.returncode == 0, done.stderr
    return root, env


def _account(root: Path) -> dict[str, Any]:
    return json.loads((root / "accounts" / "plan" / "state.json").read_text())


def _essence(state: dict[str, Any]) -> tuple[object, ...]:
    """What must be the same after a crash as without one (times and fence keys aside)."""
    until = datetime.fromisoformat(state["until"])
    return (state["condition"], state["seen_by_goal"], state["limit_hits"], until.second)


def _refused(root: Path, goal_id: str, env: dict[str, str]) -> dict[str, Any]:
    ran = cli(root, "turn", "run-once", goal_id, "--json", **env)
    attempt = json.loads(ran.stdout)
    assert attempt["report"] is None, (goal_id, attempt)
    return attempt


@pytest.fixture(scope="module")
def undisturbed(tmp_path_factory: pytest.TempPathFactory) -> tuple[object, ...]:
    root, env = _root(tmp_path_factory.mktemp("undisturbed"))
    assert cli(root, "turn", "run-once", "g1", "--json", **env).returncode == 0
    return _essence(_account(root))


@pytest.mark.parametrize("point", POINTS)
def test_a_crash_around_parking_converges_and_nothing_runs_before_the_reset(
    tmp_path: Path, point: str, undisturbed: tuple[object, ...]
) -> None:
    """Killed at ``point``, recovered: the account parked as without the crash, no turn early."""
    root, env = _root(tmp_path)
    crashed = cli(root, "turn", "run-once", "g1", LOOPX_FAULT=point, **env)
    assert crashed.returncode == 137, crashed.stderr
    assert cli(root, "recover", **env).returncode == 0
    # g2 never runs into the limit: held by the probe g1 holds, or by the parked account.
    attempt = _refused(root, "g2", env)
    assert attempt["quota"]["reason"] == "account_waiting", attempt
    # g1 itself: a host retry (its outcome was never recorded) meets the limit once more and
    # parks the account; otherwise it waits.
    cli(root, "turn", "run-once", "g1", "--json", **env)
    assert _essence(_account(root)) == undisturbed
    for goal_id in ("g1", "g2"):
        _refused(root, goal_id, env)
    turns = [
        json.loads(p.read_text())
        for goal_id in ("g1", "g2")
        for p in (root / "goals" / goal_id / "turns").glob("*.json")
    ]
    assert {t["goal_id"] for t in turns} == {"g1"}  # g2 never started one
    # A turn whose host outcome was never recorded waits, in progress, to retry after the reset.
    assert all(t["status"] == "committed" or t["outcome"] is None for t in turns), turns


@pytest.mark.parametrize(
    "point", ["account:before_update", "account:after_update", "before:scheduler_apply"]
)
def test_a_crash_around_a_429_without_a_reset_converges_to_one_backoff(
    tmp_path: Path, point: str
) -> None:
    """A bare 429, killed at ``point``, recovered: one 60 s backoff on the account, none early."""
    root, env = _root(tmp_path)
    (tmp_path / "limit").write_text("2000-01-01T00:00:00+00:00")  # no usage window: a bare 429
    bare = {**env, "FAKE_CODEX_MODE": "too_many_requests"}
    crashed = cli(root, "turn", "run-once", "g1", LOOPX_FAULT=point, **bare)
    assert crashed.returncode == 137, crashed.stderr
    assert cli(root, "recover", **env).returncode == 0
    cli(root, "turn", "run-once", "g1", "--json", **bare)  # a host retry meets it once more
    state = _account(root)
    assert (state["condition"], state["reset_unknown"], state["limit_hits"]) == (
        "limited", True, 1)  # fmt: skip
    left = datetime.fromisoformat(state["until"]) - datetime.now(UTC)
    assert timedelta(0) < left <= timedelta(seconds=60)
    for goal_id in ("g1", "g2"):
        attempt = _refused(root, goal_id, env)
        if goal_id == "g2":
            assert attempt["quota"]["message"].startswith("account plan rate limited, retry at ")
