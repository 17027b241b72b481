"""The stall ladder with the fake claude: a stalled host resumed in its session, or a gate."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from loopx.accounts.accountfiles import read_state
from loopx.accounts.records import Condition, account_of
from loopx.root import Layout
from loopx.testing import install_fake_host
from loopx.turn.journal import TurnJournal
from tests.hostkit import log_lines
from tests.turnkit import cli_env

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The fake claude and codex first on PATH with private homes; returns the work directory."""
    bin_dir = tmp_path / "bin"
    for name in ("claude", "codex"):
        install_fake_host(bin_dir, name)
        monkeypatch.setenv(f"FAKE_{name.upper()}_HOME", str(tmp_path / name))
        monkeypatch.setenv(f"FAKE_{name.upper()}_LOG", str(tmp_path / f"{name}.log"))
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setenv("LOOPX_KILL_GRACE_S", "0.5")
    work = tmp_path / "work"
    work.mkdir()
    return work


def _add(cli, work: Path, stall_timeout: str, kind: str = "claude") -> None:
    cli.run(
        "goal", "add", "g", "--objective", "make it work", "--workdir", str(work),
        "--host-kind", kind, "--stall-timeout", stall_timeout, check=True,
    )  # fmt: skip


def _turn(cli, mode: str, kind: str = "claude") -> dict:
    proc = cli.run("turn", "run-once", "g", "--json", **{f"FAKE_{kind.upper()}_MODE": mode})
    report = json.loads(proc.stdout)["report"]
    assert report is not None, proc.stdout + proc.stderr
    return report


def _journal(cli) -> TurnJournal:
    (path,) = (cli.root / "goals" / "g" / "turns").glob("*.json")
    return TurnJournal.model_validate_json(path.read_text())


def test_a_stalled_host_is_resumed_in_its_session(cli, fake, tmp_path):
    """Rung 1: the stalled session is resumed with a short "continue" prompt; the turn commits."""
    _add(cli, fake, "2")
    report = _turn(cli, "stall_fresh")
    assert (report["status"], report["kind"]) == ("committed", "progress"), report
    first, second = log_lines(tmp_path / "claude.log")
    session = json.loads(_journal(cli).outcome.stdout.splitlines()[0])["session_id"]
    assert second["argv"][second["argv"].index("--resume") + 1] == session
    assert second["stdin"].startswith("Your previous reply in this session stopped")
    assert len(second["stdin"]) < len(first["stdin"]) / 2
    ladder = _journal(cli).stall
    assert ladder is not None
    assert [r.rung for r in ladder.runs] == ["resume"]
    assert cli.json("goal", "show", "g")["state"]["consecutive_failures"] == 0


def test_a_stalled_codex_is_resumed_in_its_thread(cli, fake, tmp_path):
    """Codex: the stalled thread (named by thread.started) is resumed; the turn commits."""
    _add(cli, fake, "2", kind="codex")
    report = _turn(cli, "stall_fresh", kind="codex")
    assert (report["status"], report["kind"]) == ("committed", "progress"), report
    _, second = log_lines(tmp_path / "codex.log")
    thread = cli.json("goal", "show", "g")["state"]["host_session"]["session_id"]
    assert second["argv"][-3:] == ["resume", thread, "-"]
    assert second["stdin"].startswith("Your previous reply in this session stopped")


def test_codex_s_own_idle_timeout_is_a_stall_not_a_failure(cli, fake):
    """Codex's "idle timeout waiting for SSE" climbs the ladder to its gate, never a failure."""
    _add(cli, fake, "30", kind="codex")
    report = _turn(cli, "idle_timeout", kind="codex")
    assert report["kind"] == "needs_human", report  # every run of this mode times out
    assert cli.json("goal", "show", "g")["state"]["consecutive_failures"] == 0


def test_a_stall_that_persists_ends_at_a_gate_not_a_failure(cli, fake, tmp_path):
    """Every rung stalls: resume twice, a fresh session, then a gate with the output and the tries."""
    _add(cli, fake, "0.5")
    report = _turn(cli, "stall")
    assert (report["status"], report["kind"]) == ("committed", "needs_human"), report
    runs = log_lines(tmp_path / "claude.log")
    assert ["--resume" in r["argv"] for r in runs] == [False, True, True, False]
    state = cli.json("goal", "show", "g")["state"]
    assert state["consecutive_failures"] == 0
    (gate,) = state["open_gates"] if "open_gates" in state else state["gates"]
    assert "rung 1 (resume)" in gate["question"]
    assert "rung 2 (fresh)" in gate["question"]
    assert '"subtype": "init"' in gate["question"]  # the last output lines
    ladder = _journal(cli).stall
    assert ladder is not None
    assert [r.rung for r in ladder.runs] == ["resume", "resume", "fresh", "gate"]
    assert _journal(cli).result.evidence == ["host_stalled"]
    account = read_state(Layout.at(cli.root), account_of(None, "claude"))
    assert account.condition is Condition.OVERLOADED  # backed off, like a 5xx


def test_a_stall_that_persists_on_a_goal_with_a_fallback_hands_its_next_turn_off(
    cli, fake, tmp_path
):
    """Rung 3: the turn ends as a wait that backs its account off; the next turn runs on the
    fallback account's CLI, and nothing counts as a failure."""
    cli.run("account", "add", "alt", "--host-kind", "codex", check=True)
    cli.run(
        "goal", "add", "g", "--objective", "make it work", "--workdir", str(fake),
        "--host-kind", "claude", "--stall-timeout", "0.5", "--fallback-account", "alt",
        check=True,
    )  # fmt: skip
    report = _turn(cli, "stall")
    assert (report["status"], report["kind"]) == ("committed", "wait"), report
    ladder = _journal(cli).stall
    assert ladder is not None
    assert [r.rung for r in ladder.runs] == ["resume", "resume", "fresh", "handoff"]
    assert _journal(cli).result.evidence == ["host_stalled"]
    account = read_state(Layout.at(cli.root), account_of(None, "claude"))
    assert account.condition is Condition.OVERLOADED  # backed off, like a 5xx
    handed = json.loads(cli.run("turn", "run-once", "g", "--json").stdout)["report"]
    assert (handed["status"], handed["kind"]) == ("committed", "progress"), handed
    assert len(log_lines(tmp_path / "codex.log")) == 1  # the fallback account's CLI ran it
    state = cli.json("goal", "show", "g")["state"]
    assert (state["consecutive_failures"], state["handoffs"]) == (0, 1)


def test_an_account_s_max_resumes_bounds_the_automatic_resumes_of_all_its_goals(
    cli, fake, tmp_path
):
    """With --max-resumes 1 the ladder resumes once, then goes to its gate: the cap holds."""
    cli.run("account", "add", "work", "--host-kind", "claude", "--max-resumes", "1", check=True)
    cli.run(
        "goal", "add", "g", "--objective", "make it work", "--workdir", str(fake),
        "--host-kind", "claude", "--account", "work", "--stall-timeout", "0.5", check=True,
    )  # fmt: skip
    report = _turn(cli, "stall")
    assert (report["status"], report["kind"]) == ("committed", "needs_human"), report
    ladder = _journal(cli).stall
    assert ladder is not None
    assert [r.rung for r in ladder.runs] == ["resume", "gate"]
    taken = json.loads((cli.root / "accounts" / "work" / "resumes.json").read_text())["taken"]
    assert [goal for goal, _ in taken] == ["g"]
    assert len(log_lines(tmp_path / "claude.log")) == 2  # the turn's run and one resume


def test_the_host_s_own_idle_timeout_is_a_stall(cli, fake):
    """Claude Code's own "Request timed out." climbs the ladder too; it never counts as a failure."""
    _add(cli, fake, "30")
    report = _turn(cli, "idle_timeout")
    assert (report["status"], report["kind"]) == ("committed", "needs_human"), report
    ladder = _journal(cli).stall
    assert ladder is not None
    assert "Request timed out" in ladder.seen[0].cause


def test_status_shows_the_rung_and_the_last_output_while_the_ladder_climbs(cli, fake, tmp_path):
    """While rung 1 runs, `status --json` shows its rung and when the host last wrote output."""
    _add(cli, fake, "1")
    env = cli_env(FAKE_CLAUDE_MODE="stall", LOOPX_LEASE_TTL_S="1")
    turn = subprocess.Popen(
        [sys.executable, "-m", "loopx", "--root", str(cli.root), "turn", "run-once", "g"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 30
        lease = None
        while time.monotonic() < deadline:
            (goal,) = cli.json("status")["goals"]
            lease = goal["lease"]
            if lease is not None and lease["activity"] is not None:
                break
            time.sleep(0.1)
        assert lease is not None
        assert lease["activity"] == "stalled: rung 1 of 4, resuming session"
        assert lease["last_output_at"] is not None
        assert "stalled: rung 1 of 4" in goal["explanation"]
    finally:
        os.killpg(turn.pid, signal.SIGKILL)
        turn.wait()
