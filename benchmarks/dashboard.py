"""How fast the dashboard shows a root, and how fast a committed turn reaches an open page.

Per size (default 10 and 10,000 goals, mixed states from loopx.testing.dashboard_fixtures):

* first view: ``performance.now()`` when the first view (attention queue, fleet, first page of
  50 goals) is on screen in headless Chromium, for a fresh tab and for reloads (median of 5);
* ``GET /api/goals`` (first page) and ``GET /api/overview`` over HTTP: median of 50;
* live: a history line is appended to a goal and its change hint written (what a committing
  turn does); the time until the open goal page shows the new turn, pushed over /events
  (median and max of 5), with `loopx serve`'s defaults (refresh every 1 s).

Usage: python benchmarks/dashboard.py [--sizes 10,10000] [--chromium /usr/bin/chromium]
"""

from __future__ import annotations

import argparse
import http.client
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path

from playwright.sync_api import sync_playwright

from loopx.log import configure_logging
from loopx.model import utcnow
from loopx.root.hints import note_goal_changed
from loopx.testing.dashboard_fixtures import seed_fleet_root
from loopx.testing.status_fixtures import append_history, history_line, make_root
from loopx.web.server import make_server

ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
ROW = "#goals-panel tbody tr[data-goal]"


def http_median(port: int, path: str, rounds: int = 50) -> float:
    times = []
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    for _ in range(rounds):
        t = time.perf_counter()
        conn.request("GET", path)
        conn.getresponse().read()
        times.append(time.perf_counter() - t)
    conn.close()
    return statistics.median(times) * 1000


def measure(chromium: str, n: int) -> None:
    base = Path(tempfile.mkdtemp(prefix="loopx-dash-"))
    try:
        layout = make_root(base)
        t = time.perf_counter()
        seed_fleet_root(layout, n, now=utcnow(), workdir=base)
        seeded = time.perf_counter() - t
        t = time.perf_counter()
        server = make_server(layout, port=0)
        cold = time.perf_counter() - t
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        port = server.server_address[1]
        url = f"http://127.0.0.1:{port}/"
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=ARGS)
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto(url)
            page.wait_for_selector(ROW)
            fresh = page.evaluate("window.loopxFirstRender")
            reloads = []
            for _ in range(5):
                page.reload()
                page.wait_for_selector(ROW)
                reloads.append(page.evaluate("window.loopxFirstRender"))
            goal = "goal-00003"
            page.goto(f"{url}#/goal/{goal}")
            page.wait_for_selector("#turns-panel tbody tr")
            live = []
            for seq in range(4, 9):
                count = page.locator("#turns-panel tbody tr").count()
                time.sleep(1.3)  # land at a random point of the 1 s refresh cycle
                t = time.perf_counter()
                append_history(layout, [history_line(goal, seq, ended_at=utcnow())], fast=True)
                note_goal_changed(layout, goal)
                while page.locator("#turns-panel tbody tr").count() == count:
                    page.wait_for_timeout(10)
                live.append(time.perf_counter() - t)
            browser.close()
        api_goals = http_median(port, "/api/goals")
        api_overview = http_median(port, "/api/overview")
        server.shutdown()
        server.server_close()
        print(
            f"{n:>7,} goals | seed {seeded:6.1f} s | serve cold start {cold:6.2f} s | "
            f"first view {fresh:5.0f} ms fresh tab, {statistics.median(reloads):5.0f} ms reload | "
            f"/api/goals {api_goals:6.2f} ms | /api/overview {api_overview:6.2f} ms | "
            f"live {statistics.median(live) * 1000:5.0f} ms median, {max(live) * 1000:5.0f} ms max"
        )
    finally:
        shutil.rmtree(base, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="10,10000")
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    args = parser.parse_args()
    configure_logging(level="warning")
    for n in (int(s) for s in args.sizes.split(",")):
        measure(args.chromium, n)


if __name__ == "__main__":
    main()
