"""The dashboard in a real headless Chromium: scale, live updates, actions, phone and keyboard."""

from __future__ import annotations

import http.server
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from loopx.model import utcnow
from loopx.registry.goals import open_gate
from loopx.state import load_state
from loopx.testing.dashboard_fixtures import seed_fleet_root
from loopx.testing.status_fixtures import make_root
from loopx.web.actions import audit_file
from tests.browser.conftest import TOKEN, served, wait_js, wait_until, with_token
from tests.turnkit import cli_env, demo_goal, loopx

pytestmark = [pytest.mark.browser, pytest.mark.timeout(180)]

ROW = "#goals-panel tbody tr[data-goal]"


def history(layout, goal_id: str) -> list[dict]:
    path = layout.history_file(goal_id)
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture(scope="module")
def big_root(tmp_path_factory):
    base = tmp_path_factory.mktemp("big")
    layout = make_root(base)
    seed_fleet_root(layout, 10_000, now=utcnow(), workdir=base)
    return layout


def test_ten_thousand_goals_render_quickly_without_errors(big_root, tab, artifacts):
    """A 10,000-goal root shows its first page, attention queue and fleet, with no console error.

    The time is measured (performance.now() when the first view is on screen) and printed;
    benchmarks/dashboard.py records it in docs/benchmarks.md. The assertion is generous.
    """
    with served(big_root) as url:
        page = tab.page
        page.goto(url)
        page.wait_for_selector(ROW)
        first = page.evaluate("window.loopxFirstRender")
        page.reload()
        page.wait_for_selector(ROW)
        warm = page.evaluate("window.loopxFirstRender")
        print(f"\n10,000 goals: first view at {first:.0f} ms (cold tab), {warm:.0f} ms (reload)")
        assert page.locator(ROW).count() == 50
        assert "of 10,000" in page.inner_text("#page-info")
        assert page.locator("#attention .card").count() > 0
        assert "/4 agents" in page.inner_text("#fleet")
        page.click("#next")
        wait_js(page, "document.querySelector('#page-info').textContent.startsWith('51')")
        page.screenshot(path=artifacts / "overview-10k.png", full_page=False)
    assert tab.errors == []
    assert warm < 5_000


def test_committed_turn_appears_without_reload(layout, tmp_path, tab, artifacts):
    """A turn run by the real CLI shows on the open goal page, pushed over /events."""
    demo_goal(layout, "demo", tmp_path / "work", "--steps", "5")
    with served(layout) as url:
        page = tab.page
        page.goto(f"{url}#/goal/demo")
        page.wait_for_selector("#turns-panel")
        assert page.locator("#turns-panel tbody tr").count() == 0
        page.evaluate("window.sameDocument = true")
        proc = loopx(layout.root, "turn", "run-once", "demo")
        assert proc.returncode == 0, proc.stderr
        page.wait_for_selector("#turns-panel tbody tr.s-committed", timeout=10_000)
        assert page.evaluate("window.sameDocument") is True  # updated in place, not reloaded
        assert page.inner_text("#live") == "live"
        page.screenshot(path=artifacts / "goal-live.png", full_page=True)
    assert tab.errors == []


def test_answering_a_gate_from_the_page_lets_the_goal_run_again(layout, tmp_path, tab, artifacts):
    """Answer a gate in the page (keyboard only): the gate resolves and an agent runs the goal."""
    demo_goal(layout, "gated", tmp_path / "work", "--steps", "2")
    open_gate(layout, "gated", "Ship the release to production?", now=utcnow())
    fleet = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "loopx",
            "--root",
            str(layout.root),
            "supervisor",
            "run",
            "--agents",
            "1",
            "--stop-grace-seconds",
            "5",
        ],
        env=cli_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        with_token(tab)
        with served(layout, token=TOKEN, actions=True) as url:
            page = tab.page
            page.goto(url)
            answer = page.locator("form.answer[data-goal=gated] input")
            answer.wait_for()
            page.screenshot(path=artifacts / "gate-open.png", full_page=False)
            answer.focus()
            page.keyboard.type("Yes, ship it")
            page.keyboard.press("Enter")
            wait_until(
                lambda: load_state(layout, "gated").gates[0].answer == "Yes, ship it",
                10,
                "the gate to be resolved",
            )
            wait_until(lambda: history(layout, "gated"), 90, "an agent to run the goal")
            page.goto(f"{url}#/goal/gated")
            page.wait_for_selector("#turns-panel tbody tr.s-committed")
            page.screenshot(path=artifacts / "gate-answered.png", full_page=True)
        [record] = [json.loads(x) for x in audit_file(layout).read_text().splitlines()]
        assert (record["action"], record["outcome"], record["answer"]) == (
            "resolve-gate",
            "applied",
            "Yes, ship it",
        )
    finally:
        os.killpg(fleet.pid, signal.SIGTERM)
        try:
            fleet.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(fleet.pid, signal.SIGKILL)
            fleet.wait(timeout=10)
    assert tab.errors == []


def test_actions_are_refused_without_the_token(layout, tmp_path, tab, artifacts):
    """No token: the page asks for it; a wrong token and a cross-site page are refused."""
    demo_goal(layout, "gated", tmp_path / "work")
    open_gate(layout, "gated", "Delete the old backups?", now=utcnow())
    with served(layout, token=TOKEN, actions=True) as url:
        page = tab.page
        page.goto(url)
        page.wait_for_selector("#token-form:not([hidden])")
        page.screenshot(path=artifacts / "token-asked.png", full_page=False)
        api = f"{url}api/goals/gated/resolve-gate"
        wrong = page.evaluate(
            """async (api) => (await fetch(api, {method: 'POST', body: '{"answer": "x"}',
                 headers: {'Content-Type': 'application/json', Authorization: 'Bearer wrong'}})).status""",
            api,
        )
        assert wrong == 401
        # Another site's page (localhost is another site than 127.0.0.1) tries both ways in.
        with other_site() as evil:
            page.goto(evil)
            cross_site_attempts(page, api)
    assert load_state(layout, "gated").gates[0].answer is None
    records = [json.loads(x) for x in audit_file(layout).read_text().splitlines()]
    assert [r["outcome"] for r in records] == ["refused", "refused"]
    assert "Sec-Fetch-Site" in records[1]["detail"]


@contextmanager
def other_site() -> Iterator[str]:
    """A page on another site: a plain server on another port, addressed as localhost."""

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            self.wfile.write(b"<p>cat pictures</p>")

        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://localhost:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def cross_site_attempts(page, api: str) -> None:
    """A simple POST (no preflight, no token) and a token-carrying one (preflighted)."""
    page.evaluate(
        """async (api) => { await fetch(api, {method: 'POST', mode: 'no-cors',
             headers: {'Content-Type': 'text/plain'}, body: '{"answer": "x"}'}); }""",
        api,
    )
    preflight = page.evaluate(
        """async ([api, token]) => {
             try {
               await fetch(api, {method: 'POST', body: '{"answer": "x"}', headers:
                 {'Content-Type': 'application/json', Authorization: 'Bearer ' + token}});
               return 'sent';
             } catch (e) { return 'blocked'; } }""",
        [api, TOKEN],
    )
    assert preflight == "blocked"  # CORS preflight is a 405: the browser never sends it


def test_phone_width_and_keyboard(layout, tmp_path, browser, artifacts):
    """At 390 px nothing scrolls sideways; filtering and opening a goal work from the keyboard."""
    seed_fleet_root(layout, 40, now=utcnow(), workdir=tmp_path)
    context = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        with served(layout) as url:
            page.goto(url)
            page.wait_for_selector(ROW)
            overflow = "document.documentElement.scrollWidth - window.innerWidth"
            assert page.evaluate(overflow) <= 0
            page.screenshot(path=artifacts / "phone-overview.png", full_page=False)
            page.keyboard.press("/")
            assert page.evaluate("document.activeElement.id") == "f-q"
            page.keyboard.type("service 17 ")
            page.keyboard.press("Enter")
            wait_js(page, f"document.querySelectorAll('{ROW}').length === 1")
            page.keyboard.press("Tab")  # the Filter button
            page.keyboard.press("Tab")  # the only row's goal link
            assert page.evaluate("document.activeElement.textContent") == "goal-00017"
            page.keyboard.press("Enter")
            page.wait_for_selector("h1")
            assert page.evaluate("location.hash") == "#/goal/goal-00017"
            assert page.evaluate(overflow) <= 0
            page.screenshot(path=artifacts / "phone-goal.png", full_page=True)
            page.keyboard.press("Escape")
            page.wait_for_selector(ROW)
            assert page.evaluate("location.hash") == "#/"
    finally:
        context.close()
    assert errors == []


def test_the_goal_page_says_where_its_turns_run_and_in_which_sandbox(layout, tmp_path, tab):
    """The goal's account and host kind, its sandbox's allow-list; an unconfined goal says so."""
    from loopx.registry.goals import GoalChanges, add_goal
    from loopx.sandbox import SandboxSpec

    demo_goal(layout, "boxed", tmp_path / "w1")
    demo_goal(layout, "plain", tmp_path / "w2")
    changes = GoalChanges(sandbox=SandboxSpec(allow_domains=["pypi.org"]))
    add_goal(layout, "boxed", changes, update=True, default_workdir=tmp_path, now=utcnow())
    with served(layout) as url:
        page = tab.page
        page.goto(f"{url}#/goal/boxed")
        page.wait_for_selector("#runs-on")
        text = page.inner_text("#runs-on")
        assert "account default-demo (demo)" in text, text
        assert "sandbox bwrap: pypi.org" in text, text
        page.goto(f"{url}#/goal/plain")
        wait_until(lambda: "no sandbox" in page.inner_text("#runs-on"), 15, "an unconfined goal")
    assert tab.errors == []
