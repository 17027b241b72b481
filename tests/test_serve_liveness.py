"""Liveness: /healthz answers a probe without the token, and streams leave it descriptors."""

from __future__ import annotations

import http.client
import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from loopx.model import utcnow
from loopx.testing.dashboard_fixtures import seed_fleet_root
from loopx.web.server import HttpServer, descriptor_budget, make_server
from tests.test_server import running
from tests.turnkit import cli_env, make_root

TOKEN = "liveness-token-0123456789"


@pytest.fixture
def server(layout, tmp_path) -> Iterator[HttpServer]:
    seed_fleet_root(layout, 5, now=utcnow(), workdir=tmp_path)
    yield from running(make_server(layout, port=0, token=TOKEN, refresh_interval_s=0.2, ttl_s=0.0))


def _get(port: int, path: str, *, token: bool) -> tuple[int, dict[str, object]]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path, headers={"Authorization": f"Bearer {TOKEN}"} if token else {})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


@pytest.mark.parametrize(
    ("limit", "in_use", "connections", "streams"),
    [
        (128, 12, 100, 92),
        (1024, 12, 884, 820),
        (65536, 40, 57304, 53208),
        (20, 12, 2, 1),  # absurdly low: one stream still fits, never a negative cap
    ],
)
def test_the_descriptor_budget(limit, in_use, connections, streams):
    """Connections stay below the limit with room for files; streams below connections."""
    assert descriptor_budget(limit, in_use) == (connections, streams)


def test_healthz_without_the_token_says_ok_and_nothing_else(server):
    """A probe without the token gets {"ok": true}; the token gets the full health."""
    port = server.server_address[1]
    assert _get(port, "/healthz", token=False) == (200, {"ok": True})
    status, full = _get(port, "/healthz", token=True)
    assert (status, full["ok"], full["goals"]) == (200, True, 5)
    assert _get(port, "/status", token=False)[0] == 401


@pytest.mark.timeout(60)
def test_healthz_without_the_token_is_503_while_refreshes_fail(tmp_path: Path) -> None:
    """A refresh failing: a tokenless probe sees 503 and {"ok": false}, no detail."""
    layout = make_root(tmp_path / "root")
    proc = subprocess.Popen(
        [sys.executable, "-m", "loopx", "--root", str(layout.root), "serve", "--port", "0",
         "--refresh-interval-seconds", "0.2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=cli_env(LOOPX_SERVE_TOKEN=TOKEN, LOOPX_FAULT="loop:serve:refresh:MemoryError@2-1000"),
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline().decode().split()[4].split(":")[2].split("/")[0])
        deadline = time.monotonic() + 30
        while (answer := _get(port, "/healthz", token=False))[0] != 503:
            assert time.monotonic() < deadline, answer
            time.sleep(0.1)  # polling /healthz with a deadline
        assert answer == (503, {"ok": False})
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    assert "Traceback" not in err.decode()
