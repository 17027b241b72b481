"""The HTTP status server: routes, 100 concurrent clients, and its security rules."""

from __future__ import annotations

import http.client
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from urllib.parse import urlsplit

import pytest
from prometheus_client.parser import text_string_to_metric_families

from loopx.errors import UsageError
from loopx.model import utcnow
from loopx.testing.status_fixtures import open_gate_state, register_goals, seed_goal, write_state
from loopx.web.bind import InsecureBindError, check_bind
from loopx.web.server import HttpServer, make_server

TOKEN = "s3cret-token"


def seed(layout, n: int = 3):
    now = utcnow()
    register_goals(
        layout,
        [seed_goal(layout, f"g{i}", now=now, history=3, workdir=layout.root) for i in range(n)],
    )
    write_state(layout, open_gate_state("g1", "Merge?", now=now))


def running(server: HttpServer) -> Iterator[HttpServer]:
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture
def server(layout) -> Iterator[HttpServer]:
    seed(layout)
    yield from running(make_server(layout, host="127.0.0.1", port=0, refresh_interval_s=0.5))


@pytest.fixture
def token_server(layout) -> Iterator[HttpServer]:
    seed(layout)
    yield from running(make_server(layout, host="127.0.0.1", port=0, token=TOKEN))


def request(
    server: HttpServer,
    method: str,
    path: str,
    headers: dict[str, str] | None = None,
    body: bytes | None = None,
):
    host, port = server.server_address[:2]
    conn = http.client.HTTPConnection(host, port, timeout=30)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, resp.getheader("Content-Type"), resp.read()
    finally:
        conn.close()


def get_json(server, path, headers=None):
    status, _, body = request(server, "GET", path, headers)
    return status, json.loads(body)


def test_status_lists_the_queue(server):
    """GET /status returns counts, the fleet and the ordered queue with a page."""
    status, doc = get_json(server, "/status")
    assert status == 200
    assert [g["goal_id"] for g in doc["goals"]] == ["g1", "g0", "g2"]
    assert doc["page"] == {"offset": 0, "limit": 100, "total": 3, "next_offset": None}


def test_status_pages_and_filters(server):
    """?actor= filters and ?limit=/offset= page the queue."""
    _, doc = get_json(server, "/status?actor=agent&limit=1&offset=1")
    assert [g["goal_id"] for g in doc["goals"]] == ["g2"]
    assert doc["page"]["total"] == 2


def test_bad_query_is_400(server):
    """A malformed query parameter is a 400 with a JSON error."""
    status, doc = get_json(server, "/status?limit=-3")
    assert (status, doc["status"]) == (400, 400)


def test_goals_and_one_goal(server):
    """GET /goals lists compact rows; /goals/<id> returns the full view."""
    status, doc = get_json(server, "/goals")
    assert status == 200 and doc["goals"][0]["goal_id"] == "g1"
    status, view = get_json(server, "/goals/g1")
    assert (status, view["reason"], view["gate_question"]) == (200, "gate_pending", "Merge?")


def test_goal_turns(server):
    """GET /goals/<id>/turns returns the newest history lines first."""
    status, doc = get_json(server, "/goals/g0/turns")
    assert status == 200
    assert [t["seq"] for t in doc["turns"]] == [3, 2, 1]


def test_unknown_goal_is_404(server):
    """An unknown (or unsafe) goal id is a 404, never a path outside the root."""
    assert get_json(server, "/goals/nope")[0] == 404
    assert get_json(server, "/goals/..%2F..%2Fetc")[0] == 404


def test_healthz(server):
    """GET /healthz says ok and how many goals there are."""
    status, doc = get_json(server, "/healthz")
    assert (status, doc["ok"], doc["goals"]) == (200, True, 3)


def test_metrics_prometheus_text(server):
    """GET /metrics is Prometheus text with the documented metric families."""
    status, ctype, body = request(server, "GET", "/metrics")
    text = body.decode()
    assert status == 200 and ctype.startswith("text/plain")
    for name in (
        "loopx_turns_total",
        "loopx_quota_window_spent_wall_seconds",
        "loopx_agents_alive",
        "loopx_agent_restarts_total",
        "loopx_lease_takeovers_total",
        "loopx_recovery_decisions_total",
        "loopx_quarantined_journals",
    ):
        assert f"# TYPE {name} " in text
    assert 'loopx_turns_total{kind="progress"} 9' in text


def test_metrics_parse_at_full_precision(server):
    """/metrics reads back with prometheus_client's parser; the timestamp keeps every digit."""
    text = request(server, "GET", "/metrics")[2].decode()
    samples = {
        s.name: s.value for family in text_string_to_metric_families(text) for s in family.samples
    }
    checked = get_json(server, "/status")[1]["checked_at"]
    stamp = datetime.fromisoformat(checked).timestamp()
    # `{:g}` wrote 1.79606e+09, 45 minutes off; the exposition must keep the float exactly.
    assert abs(samples["loopx_status_checked_timestamp_seconds"] - stamp) < 1.0
    assert samples["loopx_status_checked_timestamp_seconds"] != float(f"{stamp:g}")


def test_hundred_concurrent_clients(layout):
    """100 clients at once all get a complete, identical /status."""
    seed(layout)
    # No background refresh during the burst: every reply comes from one cache generation.
    for srv in running(make_server(layout, host="127.0.0.1", port=0, refresh_interval_s=3600)):

        def fetch(_: int, srv: HttpServer = srv) -> tuple[int, bytes]:
            status, _, body = request(srv, "GET", "/status")
            return status, body

        with ThreadPoolExecutor(max_workers=100) as pool:
            results = list(pool.map(fetch, range(100)))
        assert {s for s, _ in results} == {200}
        assert len({b for _, b in results}) == 1
        assert json.loads(results[0][1])["counts"]["total"] == 3


def test_post_is_405(server):
    """Only GET (and HEAD) are allowed: POST is a 405 with an Allow header."""
    status, _, body = request(server, "POST", "/status", body=b"{}")
    assert status == 405 and json.loads(body)["status"] == 405


@pytest.mark.parametrize("method", ["PUT", "DELETE", "PATCH"])
def test_other_methods_are_405(server, method):
    """Every method but GET/HEAD is refused."""
    assert request(server, method, "/status")[0] == 405


def test_oversized_headers_are_refused(server):
    """Requests with too many or too large headers are refused before any work."""
    headers = {f"X-H{i}": "v" for i in range(40)}
    assert request(server, "GET", "/status", headers)[0] == 431


def test_silent_client_does_not_block_others(server):
    """A client that connects and sends nothing does not stop others being served."""
    host, port = server.server_address[:2]
    idle = socket.create_connection((host, port))
    try:
        assert get_json(server, "/healthz")[0] == 200
    finally:
        idle.close()


def test_token_required(token_server):
    """With a token, a request without it is a 401."""
    assert request(token_server, "GET", "/status")[0] == 401


def test_wrong_token_refused(token_server):
    """A wrong bearer token is a 401."""
    assert request(token_server, "GET", "/status", {"Authorization": "Bearer nope"})[0] == 401


def test_right_token_accepted(token_server):
    """The right bearer token is served."""
    assert request(token_server, "GET", "/status", {"Authorization": f"Bearer {TOKEN}"})[0] == 200


def test_non_loopback_without_token_refused(layout):
    """Binding a non-loopback address without a token is refused before binding."""
    with pytest.raises(InsecureBindError):
        make_server(layout, host="0.0.0.0", port=0)


@pytest.mark.parametrize("host", ["127.0.0.1", "127.3.4.5", "::1", "localhost"])
def test_loopback_needs_no_token(host):
    """Loopback addresses are allowed without a token."""
    check_bind(host, None)


def test_non_loopback_with_token_allowed():
    """A non-loopback bind with a token passes the check."""
    check_bind("0.0.0.0", TOKEN)


def test_port_in_use_is_a_usage_error(server, layout):
    """A port already taken is a clear error."""
    with pytest.raises(UsageError):
        make_server(layout, host="127.0.0.1", port=server.server_address[1])


def test_serve_cli_refuses_public_bind_without_token(cli):
    """`loopx serve --host 0.0.0.0 --no-token` exits 2 with a hint, before binding."""
    proc = cli.run("serve", "--host", "0.0.0.0", "--port", "0", "--no-token")
    assert proc.returncode == 2
    assert "--no-token" in proc.stderr and "127.0.0.1" in proc.stderr


def test_serve_cli_refuses_a_token_in_argv(cli):
    """`loopx serve --token T` exits 2 and says where a token may come from instead."""
    proc = cli.run("serve", "--port", "0", "--token", "abcdefabcdefabcdef")
    assert proc.returncode == 2
    assert "--token-file" in proc.stderr and "LOOPX_SERVE_TOKEN" in proc.stderr


def test_serve_cli_serves(layout, cli):
    """`loopx serve --port 0` prints its address and answers /healthz."""
    seed(layout)
    proc = subprocess.Popen(
        [sys.executable, "-m", "loopx", "--root", str(cli.root), "serve", "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
        env=cli.env(),
    )
    try:
        assert proc.stdout is not None
        url = urlsplit(proc.stdout.readline().split()[4])
        token = url.fragment.removeprefix("token=")
        port = url.port
        deadline = time.monotonic() + 30
        while True:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
                conn.request("GET", "/healthz", headers={"Authorization": f"Bearer {token}"})
                assert conn.getresponse().status == 200
                conn.close()
                break
            except ConnectionRefusedError:
                assert time.monotonic() < deadline
        proc.send_signal(2)
        assert proc.wait(timeout=20) == 0
    finally:
        proc.kill()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def test_metrics_show_each_accounts_state_waiting_goals_and_spend():
    """/metrics names each account's state, when it reopens, the goals it holds and its spend."""
    from datetime import UTC, datetime
    from types import SimpleNamespace

    from prometheus_client.parser import text_string_to_metric_families

    from loopx.accounts.records import AccountSummary, Condition, WindowTotals
    from loopx.web.metrics import _account_metrics, _Families

    until = datetime(2026, 12, 1, 19, 5, 59, tzinfo=UTC)
    accounts = [
        AccountSummary(name="work", host_kind="codex", state=Condition.LIMITED, until=until,
                       waiting=["g1", "g2"], spend=WindowTotals(tokens=1200, cost_usd=0.5)),
        AccountSummary(name="default-demo", host_kind="demo", default=True, state=Condition.OK),
    ]  # fmt: skip
    out = _Families()
    _account_metrics(out, SimpleNamespace(accounts=accounts))
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(out.text())
        for s in family.samples
    }
    assert samples[("loopx_account_state", (("account", "work"), ("state", "limited")))] == 1.0
    assert samples[("loopx_account_until_seconds", (("account", "work"),))] == until.timestamp()
    assert samples[("loopx_account_waiting_goals", (("account", "work"),))] == 2.0
    assert samples[("loopx_account_spend_tokens", (("account", "work"),))] == 1200.0
    assert ("loopx_account_until_seconds", (("account", "default-demo"),)) not in samples
