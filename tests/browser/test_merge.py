"""A done worktree goal's unmerged work under Needs you, merged from the page, in a real Chromium."""

from __future__ import annotations

import pytest

from loopx.root import Layout
from loopx.testing.gitwork import commit_file, git
from tests.browser.conftest import TOKEN, served, wait_js, with_token
from tests.gitkit import add_goal, repo_with_ignored_env, run_turn
from tests.test_dashboard_panels import worktree_goal
from tests.turnkit import loopx_here

pytestmark = [pytest.mark.browser, pytest.mark.timeout(90)]

CARD = "#merge-waiting li.card[data-goal='wt']"


def test_merge_waiting_goal_merges_from_its_card_after_a_confirmation(
    layout: Layout, tmp_path, tab, artifacts
) -> None:
    """The card shows the branch and its diff; Merge asks, lands, says so, and the card goes."""
    worktree_goal(layout, tmp_path, merge=False)
    with_token(tab)
    with served(layout, token=TOKEN, actions=True, refresh_interval_s=0.2) as url:
        page = tab.page
        asked: list[str] = []
        page.on("dialog", lambda dialog: (asked.append(dialog.message), dialog.accept()))
        page.goto(url)
        card = page.locator(CARD)
        card.wait_for()
        text = card.inner_text()
        assert "1 commit(s) on loopx/wt not in main" in text
        assert "1 file(s) changed, +1 \u22120" in text and "the work" in text
        page.screenshot(path=artifacts / "merge-waiting.png", full_page=True)
        card.locator("button.merge-button").click()
        wait_js(
            page, "document.getElementById('notice').textContent.includes('merged into main')", 60
        )
        assert len(asked) == 1 and "into main?" in asked[0]
        page.wait_for_selector(CARD, state="detached")
        page.goto(f"{url}#/goal/wt")
        page.wait_for_selector("#worktree-panel .merge.m-merged")
        assert page.locator("#worktree-panel button.merge-button").count() == 0
    main_log = loopx_here(layout.root, "goal", "worktree", "wt", "--json")
    assert '"ahead":0' in main_log.stdout.replace(" ", "")
    assert tab.errors == []


def test_a_merge_the_server_refuses_says_why_and_the_work_stays(
    layout: Layout, tmp_path, tab
) -> None:
    """Reopened before the click (a stale card): the page names the refusal; nothing merged."""
    worktree_goal(layout, tmp_path, merge=False)
    with_token(tab)
    # No refresh for an hour: the card stays on the page after the CLI reopens the goal.
    with served(layout, token=TOKEN, actions=True, refresh_interval_s=3600) as url:
        page = tab.page
        page.on("dialog", lambda dialog: dialog.accept())
        page.goto(url)
        page.locator(CARD).wait_for()
        assert loopx_here(layout.root, "goal", "reopen", "wt", "--yes").returncode == 0
        page.locator(f"{CARD} button.merge-button").click()
        wait_js(page, "document.getElementById('notice').textContent.includes('merge refused')")
        assert "not done" in page.inner_text("#notice")
    assert '"ahead":1' in loopx_here(
        layout.root, "goal", "worktree", "wt", "--json"
    ).stdout.replace(" ", "")


def test_a_merge_whose_check_fails_on_the_merged_tree_says_so_and_names_its_gate(
    layout: Layout, tmp_path, tab
) -> None:
    """The base broke the goal's check: the page says the base is untouched and names the gate."""
    repo = repo_with_ignored_env(tmp_path / "repo")
    check = "sh -c 'if test -f bad.txt; then echo bad.txt breaks it; exit 3; fi'"
    assert add_goal(layout.root, "g1", repo, "--done-check", check).returncode == 0
    assert run_turn(layout.root, "g1").returncode == 0
    commit_file(repo, "bad.txt", "x\n", "base breaks the goal's check")
    old = git(repo, "rev-parse", "main")
    with_token(tab)
    with served(layout, token=TOKEN, actions=True, refresh_interval_s=0.2) as url:
        page = tab.page
        page.on("dialog", lambda dialog: dialog.accept())
        page.goto(f"{url}#/goal/g1")
        page.locator("#worktree-panel button.merge-button").click()
        wait_js(page, "document.getElementById('notice').textContent.includes('gate')", 60)
        said = page.inner_text("#notice")
        assert "done-check failed on the merged tree: the base is untouched" in said
        assert "gate 1 opened" in said
        page.wait_for_selector("#worktree-panel .merge.m-check_failed")
        assert page.locator("#worktree-panel button.merge-button").count() == 0
    assert git(repo, "rev-parse", "main") == old
    assert tab.errors == []
