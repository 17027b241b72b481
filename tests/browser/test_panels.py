"""Failures, accounts, worktrees, bulk answers and the timeline in a real Chromium (issues 30, 27)."""

from __future__ import annotations

import time

import pytest

from tests.browser.conftest import TOKEN, served, with_token
from tests.test_dashboard_panels import HOSTILE, seed_failing

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
