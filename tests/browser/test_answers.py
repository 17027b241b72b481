"""Answers land where the person meant: two tabs, stale cards, drafts, double clicks."""

from __future__ import annotations

import json
import time

import pytest

from loopx.model import utcnow
from loopx.registry.goalrecords import GoalStatus
from loopx.registry.goals import get_goal, open_gate
from loopx.state import load_state
from loopx.web.actions import audit_file
from tests.browser.conftest import TOKEN, Tab, served, wait_js, with_token
from tests.turnkit import demo_goal

pytestmark = [pytest.mark.browser, pytest.mark.timeout(180)]


def wait_until(check, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def second_tab(browser) -> Tab:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(15_000)
    tab = Tab(page)
    page.on("pageerror", lambda e: tab.errors.append(str(e)))
    with_token(tab)
    return tab


def test_two_tabs_on_a_two_gate_goal_never_cross_answers(layout, tmp_path, tab, browser, artifacts):
    """Tab A answers gate 1; tab B, still showing gate 1, is refused (409) and keeps its text."""
    demo_goal(layout, "two", tmp_path / "work")
    first = open_gate(layout, "two", "Drop the staging database?", now=utcnow())
    second = open_gate(layout, "two", "May I email the customers?", now=utcnow())
    with_token(tab)
    other = second_tab(browser)
    try:
        with served(layout, token=TOKEN, actions=True, refresh_interval_s=3600) as url:
            a, b = tab.page, other.page
            for page in (a, b):
                page.goto(url)
                page.locator(f"form.answer[data-gate='{first.id}'] input").wait_for()
            b.fill(f"form.answer[data-gate='{first.id}'] input", "no, keep staging")
            a.fill(f"form.answer[data-gate='{first.id}'] input", "yes, drop staging")
            a.click(f"form.answer[data-gate='{first.id}'] button")
            wait_until(
                lambda: load_state(layout, "two").gates[0].answer == "yes, drop staging",
                10,
                "tab A's answer",
            )
            # B's page was never refreshed (no refresh for an hour): it still shows gate 1.
            b.click(f"form.answer[data-gate='{first.id}'] button")
            b.wait_for_selector("#notice:not([hidden])")
            assert "already answered" in b.inner_text("#notice")
            kept = b.locator(f"form.answer[data-gate='{second.id}'] input")
            kept.wait_for()
            assert kept.input_value() == "no, keep staging"  # the draft moved, not lost
            b.screenshot(path=artifacts / "stale-answer.png", full_page=False)
        gates = load_state(layout, "two").gates
        assert [(g.id, g.answer) for g in gates] == [
            (first.id, "yes, drop staging"),
            (second.id, None),
        ]
    finally:
        other.page.context.close()
    assert tab.errors == [] and other.errors == []


def test_a_draft_survives_live_refreshes_and_a_reload(layout, tmp_path, tab):
    """Text typed into an answer box, focus gone, stays through refreshes and a reload."""
    demo_goal(layout, "drafty", tmp_path / "work")
    gate = open_gate(layout, "drafty", "Which region?", now=utcnow())
    demo_goal(layout, "busy", tmp_path / "work2")
    with_token(tab)
    with served(layout, token=TOKEN, actions=True, refresh_interval_s=0.2, ttl_s=0.0) as url:
        page = tab.page
        page.goto(url)
        box = f"form.answer[data-goal='drafty'][data-gate='{gate.id}'] input"
        page.fill(box, "eu-west-1, after the freeze")
        page.click("#f-q")  # focus leaves the box
        seq = page.evaluate("state.seq")
        open_gate(layout, "busy", "Another question?", now=utcnow())  # a live refresh follows
        wait_until(lambda: page.evaluate("state.seq") > seq, 10, "a live change event")
        page.wait_for_selector("form.answer[data-goal='busy']")
        assert page.input_value(box) == "eu-west-1, after the freeze"
        page.reload()
        page.locator(box).wait_for()
        assert page.input_value(box) == "eu-west-1, after the freeze"
    assert tab.errors == []


def test_a_double_click_on_pause_applies_once(layout, tmp_path, tab):
    """Two quick clicks on Pause: one request is applied, the button waits while it is in flight."""
    demo_goal(layout, "clicky", tmp_path / "work")
    with_token(tab)
    with served(layout, token=TOKEN, actions=True) as url:
        page = tab.page
        page.goto(f"{url}#/goal/clicky")
        page.locator("#act-pause").dblclick()
        wait_until(lambda: get_goal(layout, "clicky").status is GoalStatus.PAUSED, 10, "the pause")
        page.wait_for_selector("#act-resume")
    records = [json.loads(x) for x in audit_file(layout).read_text().splitlines()]
    applied = [r for r in records if r["outcome"] == "applied"]
    assert [r["action"] for r in applied] == ["pause"]
    assert all("nothing written" in r["detail"] for r in applied[1:])
    assert tab.errors == []


def test_filters_search_sort_and_page_survive_a_reload(layout, tmp_path, tab):
    """The table's filter, search, sort and page are in the URL: a reload shows the same rows."""
    for i in range(8):
        demo_goal(layout, f"svc-{i}", tmp_path / f"w{i}")
    with_token(tab)
    with served(layout, token=TOKEN, actions=True) as url:
        page = tab.page
        page.goto(url)
        page.fill("#f-q", "svc")
        page.select_option("#f-sort", "id")
        wait_js(page, "location.hash.includes('sort=id') && location.hash.includes('q=svc')")
        first = page.locator("#goals-panel tbody tr").first.get_attribute("data-goal")
        assert first == "svc-0"
        page.reload()
        page.wait_for_selector("#goals-panel tbody tr[data-goal='svc-0']")
        assert page.input_value("#f-q") == "svc"
        assert page.input_value("#f-sort") == "id"
        rows = page.locator("#goals-panel tbody tr").evaluate_all(
            "rs => rs.map(r => r.dataset.goal)"
        )
        assert rows == [f"svc-{i}" for i in range(8)]
    assert tab.errors == []


def test_bulk_resume_resumes_the_ticked_goals(layout, tmp_path, tab):
    """Tick two paused goals and press Resume: both resume, the third stays paused."""
    from loopx.registry.goals import set_status

    for name in ("p1", "p2", "p3"):
        demo_goal(layout, name, tmp_path / name)
        set_status(layout, name, GoalStatus.PAUSED, now=utcnow())
    with_token(tab)
    with served(layout, token=TOKEN, actions=True) as url:
        page = tab.page
        page.on("dialog", lambda dialog: dialog.accept())
        page.goto(f"{url}#/?reason=paused&sort=id")
        page.wait_for_selector("#goals-panel tbody tr[data-goal='p3']")
        page.check("#goals-panel tr[data-goal='p1'] input.pick")
        page.check("#goals-panel tr[data-goal='p2'] input.pick")
        page.click("#bulk-resume")
        wait_until(
            lambda: (
                [get_goal(layout, n).status for n in ("p1", "p2", "p3")]
                == [GoalStatus.ACTIVE, GoalStatus.ACTIVE, GoalStatus.PAUSED]
            ),
            15,
            "the two goals to resume",
        )
    assert tab.errors == []


def test_bulk_pause_acts_once_on_the_visible_ticked_goals_after_confirming(layout, tmp_path, tab):
    """Ticked before a search: left alone; the count is confirmed; one request; buttons wait."""
    from loopx.registry.goals import set_status

    names = ("api-1", "api-2", "fin-1", "web-1")
    for name in names:
        demo_goal(layout, name, tmp_path / name)
    set_status(layout, "fin-1", GoalStatus.DONE, now=utcnow())
    asked: list[str] = []
    held: list = []

    def hold(route) -> None:  # a bound method is no handler for Playwright: a function is
        held.append(route)

    with_token(tab)
    with served(layout, token=TOKEN, actions=True) as url:
        page = tab.page
        page.on("dialog", lambda dialog: (asked.append(dialog.message), dialog.accept()))
        page.goto(f"{url}#/?sort=id")
        page.wait_for_selector("#goals-panel tbody tr[data-goal='web-1']")
        page.check("#goals-panel tr[data-goal='web-1'] input.pick")
        page.check("#goals-panel tr[data-goal='api-1'] input.pick")
        page.fill("#f-q", "api")
        page.press("#f-q", "Enter")
        page.wait_for_selector("#goals-panel tbody tr[data-goal='api-2']")
        page.wait_for_selector("#goals-panel tr[data-goal='web-1']", state="detached")
        page.check("#goals-panel tr[data-goal='api-2'] input.pick")
        page.click("#bulk-pause")
        wait_until(lambda: get_goal(layout, "api-2").status is GoalStatus.PAUSED, 10, "api-2")
        page.wait_for_selector("#bulk-action-results")
        assert asked[0].startswith("Pause 1 goal (ticked)?")
        assert [get_goal(layout, n).status for n in ("api-1", "web-1")] == [GoalStatus.ACTIVE] * 2

        # None ticked: the whole page, the finished goal left alone, in one held request.
        page.route("**/api/bulk/*", hold)
        page.fill("#f-q", "")
        page.press("#f-q", "Enter")
        page.wait_for_selector("#goals-panel tbody tr[data-goal='web-1']")
        page.click("#bulk-pause")
        page.wait_for_selector("#bulk-progress")
        page.evaluate("render()")  # a live refresh while the request is on its way
        page.wait_for_selector("#bulk-progress")
        assert page.is_disabled("#bulk-pause")
        assert page.is_disabled("#bulk-resume")
        assert len(held) == 1
        held[0].continue_()
        page.wait_for_selector("#bulk-action-results")
        page.wait_for_selector("#bulk-pause:not([disabled])")
    assert asked[1].startswith("Pause 3 goals (every goal of this page)?")
    assert "1 finished goal is left alone" in asked[1]
    assert json.loads(held[0].request.post_data) == {"goal_ids": ["api-1", "api-2", "web-1"]}
    statuses = [get_goal(layout, n).status for n in names]
    assert statuses == [GoalStatus.PAUSED, GoalStatus.PAUSED, GoalStatus.DONE, GoalStatus.PAUSED]
    assert tab.errors == []


def test_a_done_goal_offers_reopen_not_pause(layout, tmp_path, tab):
    """A done goal's page has no Pause or Resume; Reopen asks first and makes it active."""
    from loopx.registry.goals import set_status

    demo_goal(layout, "fin", tmp_path / "fin")
    set_status(layout, "fin", GoalStatus.DONE, now=utcnow())
    asked: list[str] = []
    replies = [False, True]  # dismiss the first confirmation, accept the second

    def confirm(dialog) -> None:
        asked.append(dialog.message)
        if replies.pop(0):
            dialog.accept()
        else:
            dialog.dismiss()

    with_token(tab)
    with served(layout, token=TOKEN, actions=True) as url:
        page = tab.page
        page.on("dialog", confirm)
        page.goto(f"{url}#/goal/fin")
        page.wait_for_selector("#act-reopen")
        assert page.locator("#act-pause, #act-resume, #act-done").count() == 0
        page.click("#act-reopen")
        wait_until(lambda: bool(asked), 10, "the confirmation")
        assert get_goal(layout, "fin").status is GoalStatus.DONE  # dismissed: nothing changed
        page.click("#act-reopen")
        wait_until(lambda: get_goal(layout, "fin").status is GoalStatus.ACTIVE, 10, "the reopen")
        page.wait_for_selector("#act-pause")
    assert asked[0].startswith("Reopen fin?")
    assert tab.errors == []
