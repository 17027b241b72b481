"""When a turn is not handed off: a side effect pending, the per-day cap reached, a pin.

Goal ``g`` runs a command host on account ``a``, parked by a usage limit,
with ``b`` as its fallback; its turns are taken in this process.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

import loopx
from loopx.accounts.accountstore import update_state
from loopx.accounts.records import Condition
from loopx.agents.turn import attempt_turn
from loopx.history.reader import read_history
from loopx.quota.decision import QuotaReason
from loopx.root import Layout
from loopx.testing.gitwork import git, make_repo
from loopx.turn.journal import TurnJournal
from loopx.turn.outcome import TurnStatus
from loopx.turn.steps.handing import last_turn_pending

pytestmark = pytest.mark.timeout(60)

HOST = 'cat > /dev/null; printf \'{"kind": "progress", "summary": "ok"}\' > "$LOOPX_RESULT_FILE"'
RESET = datetime(2099, 1, 1, tzinfo=UTC)


def _root(tmp_path: Path, workdir: Path, **policy: object) -> Layout:
    loopx.Root.init(tmp_path / "root")
    root = loopx.Root.open(tmp_path / "root")
    root.accounts.add("a", host_kind="command")
    root.accounts.add("b", host_kind="command")
    root.goals.add(
        "g", objective="o", workdir=workdir, host=["sh", "-c", HOST], account="a",
        fallback_accounts=["b"], **policy,
    )  # fmt: skip
    limited = {"condition": Condition.LIMITED, "until": RESET, "proven": True}
    update_state(root.layout, "a", lambda s: s.model_copy(update=limited))
    return root.layout


def _ran_on(layout: Layout) -> str | None:
    attempt = attempt_turn(layout, "g", agent_id="t")
    if attempt.report is None:
        assert attempt.quota is not None
        assert attempt.quota.reason is QuotaReason.ACCOUNT_WAITING
        return None
    return read_history(layout, "g")[-1].account


def test_uncommitted_changes_keep_the_goal_on_its_capped_account(tmp_path: Path) -> None:
    """A dirty worktree: no hand-off; committed: the next turn goes on on the fallback."""
    repo = make_repo(tmp_path / "repo")
    layout = _root(tmp_path, repo)
    (repo / "half-done.txt").write_text("x\n")
    assert _ran_on(layout) is None
    git(repo, "add", "half-done.txt")
    git(repo, "commit", "-q", "-m", "finish it")
    assert _ran_on(layout) == "b"
    journal = max(layout.turns_dir("g").glob("*.json")).read_text()
    assert "finish it" in journal  # the branch's commits, told to the fresh session


def test_the_per_day_cap_stops_hand_offs_and_a_pin_stops_them_all(tmp_path: Path) -> None:
    """`--max-handoffs-per-day 1`: one turn on b, then it waits; `--no-handoff`: none at all."""
    (tmp_path / "w").mkdir()
    layout = _root(tmp_path, tmp_path / "w", max_handoffs_per_day=1)
    assert _ran_on(layout) == "b"
    assert _ran_on(layout) is None
    pinned = loopx.Root.open(layout.root)
    pinned.goals.add("g", update=True, max_handoffs_per_day=-1, handoff=False)
    assert _ran_on(layout) is None
    pinned.goals.add("g", update=True, handoff=True)
    assert _ran_on(layout) == "b"


def test_a_turn_in_flight_or_cut_short_is_pending_one_that_committed_is_not(
    tmp_path: Path,
) -> None:
    """The journal rule of the pending check, over a real turn's journal."""
    (tmp_path / "w").mkdir()
    layout = _root(tmp_path, tmp_path / "w")
    assert _ran_on(layout) == "b"
    path = max(layout.turns_dir("g").glob("*.json"))
    journal = TurnJournal.model_validate_json(path.read_text())
    assert last_turn_pending(journal) is None
    assert last_turn_pending(None) is None
    flying = journal.model_copy(update={"status": TurnStatus.IN_PROGRESS})
    assert "in flight" in (last_turn_pending(flying) or "")
    failed = journal.model_copy(update={"status": TurnStatus.FAILED})
    assert "ended failed" in (last_turn_pending(failed) or "")
    assert last_turn_pending(failed.model_copy(update={"outcome": None})) is None


def test_an_accounts_hand_off_cap_sends_the_next_turn_to_the_next_fallback(tmp_path: Path) -> None:
    """b takes one hand-off per window (`--max-handoffs 1`): the next goes to c, then none."""
    (tmp_path / "w").mkdir()
    layout = _root(tmp_path, tmp_path / "w")
    root = loopx.Root.open(layout.root)
    root.accounts.edit("b", max_handoffs=1)
    root.accounts.add("c", host_kind="command", max_handoffs=1)
    root.goals.add("g", update=True, fallback_accounts=["b", "c"])
    assert [_ran_on(layout) for _ in range(3)] == ["b", "c", None]
    assert json.loads((layout.root / "accounts" / "b" / "handoffs.json").read_text())["taken"]
