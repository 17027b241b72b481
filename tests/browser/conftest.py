"""Headless Chromium (Debian's package) driven by Playwright, and a served root per test.

Skipped with a reason when Chromium or Playwright is missing; `.ci/setup.d/debian.sh`
installs Chromium. Screenshots go to ``$LOOPX_BROWSER_ARTIFACTS/<test>/`` (else tmp_path).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from loopx.api._serve import action_calls
from loopx.root import Layout
from loopx.web.server import make_server

CHROMIUM = os.environ.get("LOOPX_CHROMIUM", "/usr/bin/chromium")
# --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start. The rest keep a
# headless run off the network and quiet.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
TOKEN = "browser-token"


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    if not os.path.exists(CHROMIUM):
        pytest.skip(
            f"no Chromium at {CHROMIUM}: run .ci/setup.d/debian.sh (apt-get install chromium)"
        )
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="Playwright is missing: pip install -e '.[test]'"
    )
    with sync_api.sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def artifacts(tmp_path: Path, request: pytest.FixtureRequest) -> Path:
    base = os.environ.get("LOOPX_BROWSER_ARTIFACTS")
    out = Path(base) / request.node.name if base else tmp_path / "artifacts"
    out.mkdir(parents=True, exist_ok=True)
    return out


@dataclass
class Tab:
    """A page plus the console errors and uncaught exceptions it logged."""

    page: Any
    errors: list[str] = field(default_factory=list)


@pytest.fixture
def tab(browser: Any) -> Iterator[Tab]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(15_000)
    tab = Tab(page)
    page.on("console", lambda m: tab.errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: tab.errors.append(str(e)))
    try:
        yield tab
    finally:
        context.close()


def with_token(tab: Tab, token: str = TOKEN) -> None:
    """Give the page the token the way a person would once (sessionStorage)."""
    tab.page.add_init_script(f"sessionStorage.setItem('loopx-token', {token!r})")


@contextmanager
def served(layout: Layout, *, actions: bool = False, **options: Any) -> Iterator[str]:
    """``loopx serve`` on a free loopback port; yields the dashboard's URL.

    ``actions``: with the calls the API hands a server with actions.
    """
    calls = action_calls(layout) if actions else None
    server = make_server(layout, host="127.0.0.1", port=0, actions=calls, **options)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def wait_until(check: Callable[[], Any], timeout: float, what: str) -> Any:
    """``check()``'s first truthy value, polled every 0.1 s until ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.1)


def wait_js(page: Any, expression: str, timeout: float = 15) -> None:
    """Poll a JavaScript expression (wait_for_function would eval it, which our CSP forbids)."""
    wait_until(lambda: page.evaluate(expression), timeout, expression)
