"""The fleet's own incidents as Needs-you cards in a real Chromium: the supervisor down."""

from __future__ import annotations

import signal
import socket
import subprocess
from pathlib import Path

import psutil
import pytest

from loopx.fleet import AgentSlot, FleetRecord, FleetState
from loopx.model import utcnow
from loopx.root import Layout
from loopx.storage.files import atomic_write_model
from loopx.testing.status_fixtures import make_goal, register_goals
from tests.browser.conftest import TOKEN, served, wait_js, with_token

pytestmark = [pytest.mark.browser, pytest.mark.timeout(90)]

CARD = "#attention li.card.incident[data-incident='supervisor_down']"


def record_supervisor(layout: Layout, pid: int, started: float, **update: object) -> None:
    """``supervisor.json`` naming process ``pid`` (started at ``started``) as the supervisor."""
    now = utcnow()
    record = FleetRecord(
        pid=pid,
        pid_started_at=started,
        hostname=socket.gethostname(),
        agents_wanted=1,
        started_at=now,
        updated_at=now,
        slots=[AgentSlot(index=1, agent_id="agent-1")],
    )
    atomic_write_model(layout.supervisor_file, record.model_copy(update=update))


def test_a_killed_supervisor_is_a_needs_you_card_until_it_stops_cleanly(
    layout: Layout, tmp_path: Path, tab, artifacts
) -> None:
    """SIGKILL of the recorded supervisor: a card saying so appears live; a clean stop clears it."""
    register_goals(layout, [make_goal("g1", now=utcnow(), workdir=tmp_path)])
    stand_in = subprocess.Popen(["sleep", "300"])  # the supervisor's process, as psutil sees it
    try:
        started = psutil.Process(stand_in.pid).create_time()
        record_supervisor(layout, stand_in.pid, started)
        with_token(tab)
        with served(layout, token=TOKEN, refresh_interval_s=0.2) as url:
            page = tab.page
            page.goto(url)
            page.wait_for_selector("#attention")
            wait_js(page, "document.getElementById('fleet').textContent.includes('running')")
            assert page.locator(CARD).count() == 0
            stand_in.send_signal(signal.SIGKILL)
            stand_in.wait()
            page.wait_for_selector(CARD)
            card = page.locator(CARD)
            assert "Supervisor down" in card.inner_text()
            assert f"pid {stand_in.pid}" in card.locator(".incident-text").inner_text()
            assert "loopx supervisor start" in card.inner_text()
            assert "bad" in (page.locator("#fleet").get_attribute("class") or "")
            page.screenshot(path=artifacts / "supervisor-down.png", full_page=True)
            record_supervisor(layout, stand_in.pid, started, state=FleetState.STOPPED, exit_code=0)
            page.wait_for_selector(CARD, state="detached")
            assert page.locator("#attention li.card.incident").count() == 0
    finally:
        stand_in.kill()
        stand_in.wait()
    assert tab.errors == []
