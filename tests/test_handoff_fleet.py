"""A capped account's goals go on on a fallback account of another CLI, and come back after the reset.

Account ``a`` runs the fake ``codex``, account ``b`` the fake ``claude``; goals
``g1`` and ``g2`` run on ``a`` with ``b`` as their fallback, ``pinned`` too but
with ``--no-handoff``. Turns are taken in this process, one by one, each
spawning the fake CLI: a usage limit on ``a`` holds ``pinned`` while ``g1``
and ``g2`` turn at once on ``b`` in a fresh Claude session whose prompt
carries their state; once ``a``'s (shortened) reset passed they are back on
``a``, resuming their Codex thread.
"""

from __future__ import annotations

import json
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import loopx
from loopx.accounts.accountfiles import held_state
from loopx.accounts.accountstore import update_state
from loopx.accounts.rules import admit
from loopx.agents.turn import attempt_turn
from loopx.history.reader import read_history
from loopx.model import utcnow
from loopx.quota.decision import QuotaReason
from loopx.registry.store import read_goal
from loopx.root import Layout
from loopx.schedule.candidates import candidate_of
from loopx.state import load_state
from loopx.testing import install_fake_host

pytestmark = pytest.mark.timeout(60)

FIRST = {
    "kind": "progress",
    "summary": "lexer done",
    "next_action": "write the parser",
    "state_patch": {
        "beliefs": ["the lexer handles unicode"],
        "todos": [{"id": "t1", "text": "test the parser on empty input"}],
    },
}


def _runs(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def _turn(layout: Layout, goal_id: str) -> loopx.TurnAttempt:
    return attempt_turn(layout, goal_id, agent_id="t")


def _admitted(layout: Layout, goal_id: str) -> None:
    """Wait until account ``a`` admits a turn of ``goal_id`` (its staggered starts)."""
    deadline = time.monotonic() + 10
    while not admit(held_state(layout, "a"), goal_id, now=utcnow()).allowed:
        assert time.monotonic() < deadline
        time.sleep(0.05)


@pytest.fixture
def fleet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Layout, Path]:
    """Accounts ``a`` (codex) and ``b`` (claude); g1, g2 hand off from a to b, ``pinned`` not."""
    bin_dir = tmp_path / "bin"
    for name in ("codex", "claude"):
        install_fake_host(bin_dir, name)
        monkeypatch.setenv(f"FAKE_{name.upper()}_HOME", str(tmp_path / f"{name}-home"))
        monkeypatch.setenv(f"FAKE_{name.upper()}_LOG", str(tmp_path / f"{name}.log"))
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setenv("TZ", "UTC")
    loopx.Root.init(tmp_path / "root")
    root = loopx.Root.open(tmp_path / "root")
    root.accounts.add("a", host_kind="codex")
    root.accounts.add("b", host_kind="claude")
    for goal_id in ("g1", "g2", "pinned"):
        (tmp_path / goal_id).mkdir()
        root.goals.add(
            goal_id, objective=f"build the {goal_id} compiler", workdir=tmp_path / goal_id,
            host_kind="codex", account="a", fallback_accounts=["b"],
            handoff=goal_id != "pinned",
        )  # fmt: skip
    return root.layout, tmp_path


def test_a_capped_accounts_goals_go_on_elsewhere_with_their_state_and_come_back(
    fleet: tuple[Layout, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Limit on a: g1, g2 turn on b (state in the prompt), pinned waits; after the reset, back."""
    layout, tmp = fleet
    update_state(layout, "a", lambda s: s.model_copy(update={"proven": True}))  # in use already
    monkeypatch.setenv("FAKE_CODEX_RESULT", json.dumps(FIRST))
    for goal_id in ("g1", "g2"):
        assert _turn(layout, goal_id).report is not None
    threads = {g: load_state(layout, g).host_session for g in ("g1", "g2")}
    assert all(s is not None and s.account == "a" for s in threads.values())
    # Given: a's usage limit, met by g1's turn.
    monkeypatch.setenv("FAKE_CODEX_MODE", "rate_limit")
    limited = _turn(layout, "g1").report
    assert limited is not None and limited.kind == "wait"
    assert load_state(layout, "g1").next_eligible_at is None  # the limit holds a, not g1
    monkeypatch.delenv("FAKE_CODEX_MODE")
    # When: the goals are chosen and turn now.
    now = utcnow()
    assert candidate_of(layout, read_goal(layout, "g2"), now=now).quota_allowed
    assert not candidate_of(layout, read_goal(layout, "pinned"), now=now).quota_allowed
    held = _turn(layout, "pinned")
    assert held.report is None and held.quota is not None
    assert held.quota.reason is QuotaReason.ACCOUNT_WAITING
    codex_runs = len(_runs(tmp / "codex.log"))
    for goal_id in ("g1", "g2"):
        report = _turn(layout, goal_id).report
        assert report is not None and report.status == "committed"
    # Then: both ran on b's claude, fresh, told their state and the hand-off.
    assert len(_runs(tmp / "codex.log")) == codex_runs
    claude = _runs(tmp / "claude.log")
    assert len(claude) == 2
    for goal_id, run in zip(("g1", "g2"), claude, strict=True):
        prompt = run["stdin"]
        assert "--resume" not in run["argv"]
        assert f"build the {goal_id} compiler" in prompt
        assert "the lexer handles unicode" in prompt
        assert "[t1] test the parser on empty input" in prompt
        assert "write the parser" in prompt
        assert "## Hand-off" in prompt and "account a limited until" in prompt
        last = read_history(layout, goal_id)[-1]
        assert (last.account, last.host_kind, last.handed_off) == ("b", "claude", True)
        assert load_state(layout, goal_id).handoffs == 1
        kept, thread = load_state(layout, goal_id).host_session, threads[goal_id]
        assert kept is not None and thread is not None
        assert (kept.account, kept.session_id) == ("a", thread.session_id)  # a's, kept
    # When: a's reset comes (shortened), the goals are back on a, in their Codex thread.
    update_state(layout, "a", lambda s: s.model_copy(update={"until": utcnow()}))
    for goal_id in ("g1", "g2"):
        _admitted(layout, goal_id)
        assert _turn(layout, goal_id).report is not None
        last = read_history(layout, goal_id)[-1]
        assert (last.account, last.host_kind, last.handed_off) == ("a", "codex", False)
    resumed = [run["argv"] for run in _runs(tmp / "codex.log")[-2:]]
    for goal_id, argv in zip(("g1", "g2"), resumed, strict=True):
        session = threads[goal_id]
        assert session is not None and argv[argv.index("resume") + 1] == session.session_id
    assert len(_runs(tmp / "claude.log")) == 2
    assert utcnow() - now < timedelta(minutes=1)
