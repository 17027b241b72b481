"""Goals driven by the fake codex, claude and gemini CLIs through the real turn engine (`turn run-once`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loopx.testing import install_fake_host
from tests.hostkit import log_lines


@pytest.fixture
def fakes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The fakes first on PATH, with private homes; returns the work directory."""
    bin_dir = tmp_path / "bin"
    install_fake_host(bin_dir, "codex")
    install_fake_host(bin_dir, "claude")
    install_fake_host(bin_dir, "gemini")
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    for name in ("CODEX", "CLAUDE", "GEMINI"):
        monkeypatch.setenv(f"FAKE_{name}_HOME", str(tmp_path / name.lower()))
        monkeypatch.setenv(f"FAKE_{name}_LOG", str(tmp_path / f"{name.lower()}.log"))
    work = tmp_path / "work"
    work.mkdir()
    return work


def add(cli, goal_id: str, kind: str, work: Path, *flags: str) -> None:
    cli.run(
        "goal", "add", goal_id, "--objective", "make it work", "--workdir", str(work),
        "--host-kind", kind, *flags, check=True,
    )  # fmt: skip


def run_once(cli, goal_id: str, **env: str) -> dict:
    proc = cli.run("turn", "run-once", goal_id, "--json", **env)
    assert proc.stdout, proc.stderr
    report = json.loads(proc.stdout)["report"]
    assert report is not None, proc.stdout
    return report


def state(cli, goal_id: str) -> dict:
    return cli.json("goal", "show", goal_id)["state"]


def test_codex_goal_resumes_its_thread_and_records_turn_tokens(cli, fakes, tmp_path):
    """Two codex turns: the second resumes the first's thread; each records only its own tokens."""
    add(cli, "c1", "codex", fakes)
    first = run_once(cli, "c1")
    thread = state(cli, "c1")["host_session"]["session_id"]
    second = run_once(cli, "c1", FAKE_CODEX_TOKENS="300,50")
    assert (first["status"], second["status"]) == ("committed", "committed")
    assert log_lines(tmp_path / "codex.log")[1]["argv"][-3:] == ["resume", thread, "-"]
    assert (second["usage"]["input_tokens"], second["usage"]["output_tokens"]) == (300, 50)
    session = state(cli, "c1")["host_session"]
    assert (session["session_id"], session["turns"]) == (thread, 2)


def test_claude_goal_records_tokens_and_cost(cli, fakes):
    """A claude turn commits its result with the tokens and cost Claude Code reported."""
    add(cli, "k1", "claude", fakes)
    report = run_once(cli, "k1")
    assert (report["status"], report["kind"]) == ("committed", "progress")
    usage = report["usage"]
    assert (usage["input_tokens"], usage["output_tokens"], usage["cost_usd"]) == (1510, 200, 0.0123)
    assert state(cli, "k1")["host_session"]["kind"] == "claude"


def test_session_max_turns_starts_a_fresh_claude_session(cli, fakes, tmp_path):
    """With --session-max-turns 1, the second turn does not resume."""
    add(cli, "k1", "claude", fakes, "--session-max-turns", "1")
    run_once(cli, "k1")
    first = state(cli, "k1")["host_session"]["session_id"]
    run_once(cli, "k1")
    assert "--resume" not in log_lines(tmp_path / "claude.log")[1]["argv"]
    assert state(cli, "k1")["host_session"]["session_id"] != first


def test_reset_session_makes_the_next_turn_fresh(cli, fakes, tmp_path):
    """After `goal reset-session`, codex is not asked to resume."""
    add(cli, "c1", "codex", fakes)
    run_once(cli, "c1")
    cli.run("goal", "reset-session", "c1", check=True)
    run_once(cli, "c1")
    assert "resume" not in log_lines(tmp_path / "codex.log")[1]["argv"]


@pytest.mark.parametrize(
    ("kind", "mode", "reason"),
    [
        ("codex", "auth", "host_auth"),
        ("codex", "exit", "host_exit"),
        ("claude", "max_turns", "host_max_turns"),
        ("gemini", "auth", "host_auth"),
    ],
)
def test_failures_fail_the_turn_with_their_reason(cli, fakes, kind, mode, reason):
    """A CLI failure ends the turn `failed` with its typed reason (all reasons: adapter tests)."""
    add(cli, "g1", kind, fakes)
    report = run_once(cli, "g1", **{f"FAKE_{kind.upper()}_MODE": mode})
    assert report["status"] == "failed"
    assert report["failure"]["reason"] == reason


@pytest.mark.parametrize("kind", ["codex", "claude", "gemini"])
def test_rate_limit_commits_a_wait(cli, fakes, kind):
    """A rate limit is a committed `wait`: the goal is next eligible after the reset."""
    add(cli, "g1", kind, fakes)
    report = run_once(cli, "g1", **{f"FAKE_{kind.upper()}_MODE": "rate_limit"})
    assert (report["status"], report["kind"]) == ("committed", "wait")
    after = state(cli, "g1")
    assert after["next_eligible_at"] is not None
    assert after["consecutive_failures"] == 0


def test_missing_binary_at_run_time_is_host_missing(cli, fakes, tmp_path):
    """A codex removed after `goal add` fails the turn with host_missing."""
    add(cli, "c1", "codex", fakes)
    (tmp_path / "bin" / "codex").unlink()
    report = run_once(cli, "c1")
    assert report["status"] == "failed"
    assert report["failure"]["reason"] == "host_missing"


def test_lost_session_is_dropped_and_the_next_turn_starts_fresh(cli, fakes, tmp_path):
    """A thread codex no longer knows fails once; the turn after starts a new thread."""
    add(cli, "c1", "codex", fakes)
    run_once(cli, "c1")
    for thread in (tmp_path / "codex" / "threads").iterdir():
        thread.unlink()
    failed = run_once(cli, "c1")
    assert failed["failure"]["reason"] == "host_execution_error"
    assert state(cli, "c1")["host_session"]["session_id"] == ""


def test_codex_stuck_reconnecting_commits_a_wait_not_a_timeout(cli, fakes):
    """The fake loops `Reconnecting... waiting for network`; the turn stops it and waits."""
    add(cli, "c1", "codex", fakes, "--unreachable-after", "1", "--turn-timeout", "300")
    report = run_once(cli, "c1", FAKE_CODEX_MODE="unreachable")
    assert (report["status"], report["kind"]) == ("committed", "wait"), report
    assert report["usage"]["wall_s"] < 60
    assert "could not reach its model server" in report["summary"]


def test_gemini_goal_resumes_its_session_and_records_tokens(cli, fakes, tmp_path):
    """Two gemini turns: the second resumes the first's session; each records its own tokens."""
    add(cli, "m1", "gemini", fakes, "--host=--approval-mode yolo")
    first = run_once(cli, "m1")
    session = state(cli, "m1")["host_session"]["session_id"]
    second = run_once(cli, "m1")
    assert (first["status"], first["kind"], second["status"]) == (
        "committed",
        "progress",
        "committed",
    )
    argv = log_lines(tmp_path / "gemini.log")[1]["argv"]
    assert argv[argv.index("--resume") + 1] == session
    assert argv[-2:] == ["--prompt", ""]
    assert (second["usage"]["input_tokens"], second["usage"]["output_tokens"]) == (1500, 200)
    assert state(cli, "m1")["host_session"]["turns"] == 2


@pytest.mark.parametrize("kind", ["codex", "claude", "gemini"])
def test_server_error_commits_a_wait_not_a_failure(cli, fakes, kind):
    """A 5xx the CLI gave up on is a committed host_server_error wait: no failure streak."""
    add(cli, "g1", kind, fakes)
    report = run_once(cli, "g1", **{f"FAKE_{kind.upper()}_MODE": "server_error"})
    assert (report["status"], report["kind"]) == ("committed", "wait"), report
    assert "model server failed" in report["summary"]
    assert state(cli, "g1")["consecutive_failures"] == 0
