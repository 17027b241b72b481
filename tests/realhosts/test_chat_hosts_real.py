"""The real OpenCode, Qwen Code, pi and aider CLIs against the mock's Chat Completions API: typed failures.

Success over several turns is tests/realhosts/test_contract_real.py; what each CLI printed
for every mode is replayed by tests/test_host_contract.py. Here each failure the mock can
produce is met by the live CLI and must end in its typed outcome. Qwen Code retries a 429 and
a 5xx seven times with backoff (about 80 s) before it reports; those two are left to its
recorded transcripts. aider retries them (and a refused connection) for about 100 s, printing
each error: LoopX's stall watch stops it after --unreachable-after and reads the last one.
"""

from __future__ import annotations

import pytest

from tests.realhosts.conftest import AIDER_FLAGS, add_goal, run_once

pytestmark = [pytest.mark.realhosts, pytest.mark.timeout(120)]

ENVS = {"opencode": "opencode_env", "qwen": "qwen_env", "pi": "pi_env", "aider": "aider_env"}
# OpenCode retries these without end, aider for long: LoopX's stall watch stops them after this
# many seconds.
STALL = ("--unreachable-after", "3")
# The flags a kind needs to reach the mock's model.
FLAGS = {"aider": (f"--host={AIDER_FLAGS}",)}


def _goal(cli, request, tmp_path, kind):
    env = request.getfixturevalue(ENVS[kind])
    add_goal(cli, env, "c1", kind, tmp_path / "work", *STALL, *FLAGS.get(kind, ()))
    return env


@pytest.mark.parametrize("kind", sorted(ENVS))
def test_rejected_key_is_host_auth(cli, mock, tmp_path, request, kind):
    """HTTP 401 from the model: the turn fails host_auth (its account is gated)."""
    mock.model.mode = "401"
    env = _goal(cli, request, tmp_path, kind)
    report = run_once(cli, "c1", env)
    assert (report["status"], report["failure"]["reason"]) == ("failed", "host_auth"), report


@pytest.mark.parametrize("kind", sorted(ENVS))
def test_unreachable_server_is_a_wait(cli, mock, tmp_path, request, kind):
    """Connections refused: a committed 5-minute wait, host_unreachable, well before the timeout."""
    mock.unreachable()
    env = _goal(cli, request, tmp_path, kind)
    report = run_once(cli, "c1", env)
    assert (report["status"], report["kind"]) == ("committed", "wait"), report
    assert report["result"]["evidence"] == ["host_unreachable"]
    assert report["result"]["wait_seconds"] == 300


@pytest.mark.parametrize("kind", ["opencode", "pi", "aider"])
@pytest.mark.parametrize(
    ("mode", "evidence"), [("429", "host_rate_limited"), ("500", "host_server_error")]
)
def test_rate_limit_and_server_error_are_waits(cli, mock, tmp_path, request, kind, mode, evidence):  # noqa: PLR0917 - fixtures and parameters
    """A 429 is a wait until the reset; a 5xx a 5-minute wait; neither fails the goal."""
    mock.model.mode, mock.model.retry_after = mode, "1"
    env = _goal(cli, request, tmp_path, kind)
    report = run_once(cli, "c1", env)
    assert (report["status"], report["kind"]) == ("committed", "wait"), report
    assert report["result"]["evidence"][0] == evidence
