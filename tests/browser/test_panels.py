"""Failures, accounts, worktrees, bulk answers and the timeline in a real Chromium."""

from __future__ import annotations

import time

import pytest

from tests.browser.conftest import TOKEN, served, with_token
from tests.test_dashboard_panels import (
    HOSTILE,
    gated_goals,
    seed_accounts,
    seed_failing,
    worktree_goal,
)

pytestmark = [pytest.mark.browser, pytest.mark.timeout(180)]


def wait_until(check, seconds: float, what: str):
    deadline = time.monotonic() + seconds
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def not_pwned(page) -> None:
    """No hostile text ran as script or became an element."""
    assert page.evaluate("window.pwned === undefined")
    assert page.locator("main img, main script").count() == 0


def test_a_failing_goal_shows_its_message_and_opens_its_run_log(layout, tmp_path, tab, artifacts):
    """The card says why the turns failed, in the host's words, and its link shows the run log."""
    message = f"the host exited with code 3: {HOSTILE}"
    seed_failing(layout, "broken", tmp_path, message=message)
    with_token(tab)
    with served(layout, token=TOKEN) as url:
        page = tab.page
        page.goto(url)
        card = page.locator("#attention li.card[data-goal='broken']")
        card.wait_for()
        assert card.locator(".failure-message").inner_text() == message
        assert "Turn 3 failed (host_exit)" in card.locator(".failure").inner_text()
        row = page.locator("#goals-panel tr[data-goal='broken'] td.why")
        assert row.inner_text() == f"host_exit: {message}"
        card.locator("a", has_text="Run log of turn 3").click()
        page.wait_for_selector("#run-log")
        assert HOSTILE in page.inner_text("#run-log")
        assert page.locator("#last-failure .failure-message").inner_text() == message
        page.screenshot(path=artifacts / "failing-run-log.png", full_page=True)
        page.goto(f"{url}#/goal/broken/run/latest")
        wait_until(lambda: "turn 3" in page.inner_text("#run-log h2"), 10, "the latest run log")
        not_pwned(page)
    assert tab.errors == []


def test_the_accounts_panel_shows_state_spend_and_waiting_goals(layout, tmp_path, tab, artifacts):
    """Each account: limited until T with the goals it holds, an estimated spend, a question."""
    seed_accounts(layout, tmp_path)
    with_token(tab)
    with served(layout, token=TOKEN) as url:
        page = tab.page
        page.goto(url)
        panel = page.locator("#accounts-panel")
        panel.wait_for()
        work = panel.locator("tr[data-account='work']")
        assert "limited until in 2m" in work.inner_text() or "limited until in 1m" in (
            work.inner_text()
        )
        assert work.locator("td.waiting a").all_inner_texts() == ["w0", "w1", "w2"]
        metered = panel.locator("tr[data-account='metered']")
        assert "120,000 of 1,000,000 tokens, $0.60 in 24h" in metered.inner_text()
        assert metered.locator(".badge.estimate").inner_text() == "estimate"
        authy = panel.locator("tr[data-account='authy']")
        assert "needs a human" in authy.inner_text()
        assert authy.locator(".question").inner_text() == f"log in again: {HOSTILE}"
        page.screenshot(path=artifacts / "accounts.png", full_page=True)
        work.locator("td.waiting a", has_text="w1").click()
        page.wait_for_selector("h1")
        assert page.evaluate("location.hash") == "#/goal/w1"
        not_pwned(page)
    assert tab.errors == []


def test_a_worktree_goal_page_shows_its_branch_and_merge(layout, tmp_path, tab, artifacts):
    """The goal page of a merged --worktree goal names its branch, folder and the merge."""
    tree = worktree_goal(layout, tmp_path, merge=True)
    with_token(tab)
    with served(layout, token=TOKEN) as url:
        page = tab.page
        page.goto(f"{url}#/goal/wt")
        panel = page.locator("#worktree-panel")
        panel.wait_for()
        text = panel.inner_text()
        assert "loopx/wt" in text and str(tree) in text
        assert panel.locator(".merge.m-merged").inner_text() == "merged"
        page.screenshot(path=artifacts / "worktree.png", full_page=True)
    assert tab.errors == []


def test_one_answer_for_two_gates_of_two_goals_reports_each(layout, tmp_path, tab, artifacts):
    """Tick three gated goals, one answer: two land, the one answered meanwhile is refused."""
    from loopx.model import utcnow
    from loopx.registry.goals import resolve_gate
    from loopx.state import load_state

    gated_goals(layout, tmp_path)
    with_token(tab)
    # No refresh for an hour: the page keeps showing g-c's gate 2 after the CLI answers it.
    with served(layout, token=TOKEN, actions=True, refresh_interval_s=3600) as url:
        page = tab.page
        asked: list[str] = []
        page.on("dialog", lambda dialog: (asked.append(dialog.message), dialog.accept()))
        page.goto(f"{url}#/?reason=gate_pending&sort=id")
        page.wait_for_selector("#goals-panel tr[data-goal='g-c']")
        for goal in ("g-a", "g-b", "g-c"):
            page.check(f"#goals-panel tr[data-goal='{goal}'] input.pick")
        current = load_state(layout, "g-c").open_gates[0]
        resolve_gate(layout, "g-c", "not now", now=utcnow(), gate_id=current.id)
        page.fill("#bulk-answer-text", "yes, ship it")
        page.click("#bulk-answer")
        results = page.locator("#bulk-results li")
        wait_until(lambda: results.count() == 3, 15, "three results")
        outcomes = dict(
            zip(
                results.evaluate_all("rs => rs.map(r => r.dataset.goal)"),
                results.locator(".bulk-outcome").all_inner_texts(),
                strict=True,
            )
        )
        assert outcomes == {"g-a": "answered", "g-b": "answered", "g-c": "refused (409)"}
        assert asked == ["Answer 3 gates with “yes, ship it”?\ng-a, g-b, g-c"]
        assert "already answered" in page.inner_text("#bulk-results li[data-goal='g-c']")
        page.screenshot(path=artifacts / "bulk-answer.png", full_page=True)
        not_pwned(page)
    assert [load_state(layout, g).gates[0].answer for g in ("g-a", "g-b")] == ["yes, ship it"] * 2
    assert load_state(layout, "g-c").gates[-1].answer == "not now"
    assert tab.errors == []


def test_the_timeline_draws_each_agents_turns_as_bars(layout, tmp_path, tab, artifacts):
    """One row per agent, a bar per turn coloured by outcome; a bar opens its run log."""
    from loopx.fleet import AgentHeartbeat, AgentPhase
    from loopx.model import utcnow
    from loopx.storage.files import atomic_write_model
    from loopx.testing.dashboard_fixtures import seed_fleet_root

    now = utcnow()
    seed_fleet_root(layout, 20, now=now, workdir=tmp_path)
    beat = AgentHeartbeat(
        agent_id="agent-3", pid=1, pid_started_at=0.0, hostname="h", phase=AgentPhase.RUNNING,
        goal_id="goal-00003", turn_key="goal-00003-000004-5", turn_started_at=now,
        started_at=now, beat_at=now,
    )  # fmt: skip
    atomic_write_model(layout.agent_file("agent-3"), beat)
    with_token(tab)
    with served(layout, token=TOKEN) as url:
        page = tab.page
        page.goto(url)
        panel = page.locator("#timeline-panel")
        panel.wait_for()
        rows = panel.locator("g.tl-row").evaluate_all("gs => gs.map(g => g.dataset.agent)")
        assert rows == ["agent-1", "agent-2", "agent-3", "agent-4"]
        agent1 = panel.locator("g.tl-row[data-agent='agent-1'] rect.tl-bar")
        assert agent1.count() == 60
        widths = agent1.evaluate_all("rs => rs.map(r => r.getBoundingClientRect().width)")
        assert all(w >= 2 for w in widths)
        assert panel.locator("rect.tl-failed").count() == 3  # goal-00005's three failed turns
        assert panel.locator("g.tl-row[data-agent='agent-3'] rect.tl-running").count() == 1
        panel.screenshot(path=artifacts / "timeline.png")
        # The fixture's turns overlap on one agent (a real agent's never do): open it by keyboard.
        panel.locator("a.tl-link:has(rect[data-turn='goal-00005-000003-3'])").focus()
        page.keyboard.press("Enter")
        page.wait_for_selector("#run-log")
        assert page.evaluate("location.hash") == "#/goal/goal-00005/run/3"
    assert tab.errors == []
