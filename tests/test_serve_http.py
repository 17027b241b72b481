"""`loopx serve` as an HTTP server: the Host allow-list, 500 event streams, dead clients, tokens."""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from loopx.model import utcnow
from loopx.testing.dashboard_fixtures import seed_fleet_root
from loopx.web.bind import allowed_hosts, host_allowed
from loopx.web.server import HttpServer, make_server
from tests.test_server import running, seed

TOKEN = "http-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
ROUTES = ["/", "/static/dashboard.js", "/status", "/goals", "/goals/g1", "/healthz", "/metrics",
          "/events", "/api/overview", "/api/goals", "/api/goals/g1", "/nope"]  # fmt: skip


@pytest.fixture
def server(layout) -> Iterator[HttpServer]:
    seed(layout)
    yield from running(make_server(layout, port=0, token=TOKEN, request_timeout_s=2.0))


def ask(server, path, host_header, method="GET", headers=None, *, timeout=30.0):
    host, port = server.server_address
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.putrequest(method, path, skip_host=True)
        conn.putheader("Host", host_header)
        for k, v in {**AUTH, **(headers or {})}.items():
            conn.putheader(k, v)
        conn.endheaders()
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


# --- Host allow-list -----------------------------------------------------------------------------


@pytest.mark.parametrize("path", ROUTES)
@pytest.mark.parametrize("host", ["evil.example:8765", "evil.example", "127.0.0.1.nip.io", ""])
def test_other_hosts_get_421_on_every_route(server, path, host):
    """A rebinding page's Host (or none) is refused on every route, data or not."""
    status, body = ask(server, path, host)
    assert status == 421
    assert "Host" in json.loads(body)["error"]


def test_post_from_another_host_is_421_too(server):
    """An action is refused by Host before anything else."""
    status, _ = ask(server, "/api/goals/g1/pause", "evil.example", "POST")
    assert status == 421


@pytest.mark.parametrize("name", ["127.0.0.1:{port}", "localhost:{port}", "[::1]:{port}"])
def test_loopback_names_with_the_port_are_answered(server, name):
    """The three loopback spellings with the bound port are answered."""
    port = server.server_address[1]
    assert ask(server, "/healthz", name.format(port=port))[0] == 200


def test_loopback_names_with_another_port_are_refused(server):
    """localhost on another port is another origin: 421."""
    port = server.server_address[1]
    assert ask(server, "/healthz", f"localhost:{port + 1}")[0] == 421


def test_allowed_host_is_answered(layout):
    """--allowed-host NAME answers NAME (any port), as behind a reverse proxy."""
    seed(layout)
    srv = make_server(layout, port=0, token=TOKEN, allowed_hosts=["Dash.Example.com"])
    for s in running(srv):
        assert ask(s, "/healthz", "dash.example.com")[0] == 200
        assert ask(s, "/healthz", "dash.example.com:443")[0] == 200
        assert ask(s, "/healthz", "other.example.com")[0] == 421


def test_allow_list_rules():
    """Loopback binds answer loopback names; a wildcard answers all unless names are given."""
    loop = allowed_hosts("127.0.0.1", 80)
    assert host_allowed("127.0.0.1:80", loop) and host_allowed("[::1]:80", loop)
    assert not host_allowed("127.0.0.1", loop) and not host_allowed(None, loop)
    assert allowed_hosts("0.0.0.0", 80) is None
    wild = allowed_hosts("0.0.0.0", 80, ["proxy.example"])
    assert host_allowed("proxy.example", wild) and not host_allowed("evil.example", wild)
    assert host_allowed("10.0.0.5:80", allowed_hosts("10.0.0.5", 80))


# --- 500 event streams, dead clients -------------------------------------------------------------


def _open_stream(host: str, port: int) -> socket.socket:
    sock = socket.create_connection((host, port), timeout=30)
    head = f"GET /events HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {TOKEN}\r\n\r\n"
    sock.sendall(head.encode())
    return sock


def _read_hello(sock: socket.socket, deadline: float) -> None:
    data = b""
    while b"event: hello" not in data:
        sock.settimeout(max(0.1, deadline - time.monotonic()))
        chunk = sock.recv(4096)
        assert chunk, "a stream closed before its hello"
        data += chunk
    assert data.startswith(b"HTTP/1.1 200")


@pytest.mark.timeout(240)
def test_500_event_streams_are_held_and_the_page_still_answers(layout, tmp_path):
    """500 open /events streams each get their hello; the page and the API still answer (5 s)."""
    seed_fleet_root(layout, 30, now=utcnow(), workdir=tmp_path)
    srv = make_server(layout, port=0, token=TOKEN, refresh_interval_s=0.5)
    socks: list[socket.socket] = []
    for s in running(srv):
        host, port = s.server_address
        try:
            deadline = time.monotonic() + 120
            socks.extend(_open_stream(host, port) for _ in range(500))
            for sock in socks:
                _read_hello(sock, deadline)
            for path in ("/", "/api/overview", "/api/goals?limit=50", "/status"):
                # A deadline, not a duration: a starved server times the request out.
                status, _ = ask(s, path, f"{host}:{port}", timeout=5.0)
                assert (path, status) == (path, 200)
        finally:
            for sock in socks:
                sock.close()


def test_a_silent_connection_is_closed_at_the_request_deadline(server):
    """A client that connects and never sends a byte is dropped (2 s here), not kept for ever."""
    host, port = server.server_address
    sock = socket.create_connection((host, port), timeout=10)  # the deadline: recv raises past it
    try:
        assert sock.recv(1024) == b""
    finally:
        sock.close()


def test_streams_end_when_the_server_stops(layout):
    """Stopping the server ends open event streams within the grace period."""
    seed(layout)
    srv = make_server(layout, port=0, token=TOKEN)
    sock = None
    for s in running(srv):
        host, port = s.server_address
        sock = _open_stream(host, port)
        _read_hello(sock, time.monotonic() + 10)
    assert sock is not None
    sock.settimeout(8)  # the deadline: a stream still open past it raises
    while sock.recv(4096):
        pass
    sock.close()


# --- tokens --------------------------------------------------------------------------------------


def _serve(cli, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "loopx", "--root", str(cli.root), "serve", "--port", "0", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**cli.env(), **(env or {})},
    )


def _stop(proc: subprocess.Popen[str]) -> tuple[int, str]:
    proc.send_signal(2)
    try:
        code = proc.wait(timeout=20)
    finally:
        proc.kill()
        _, err = proc.communicate()
    return code, err


def _status_of(url: str, token: str | None) -> int:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        conn.request(
            "GET", "/status", headers={"Authorization": f"Bearer {token}"} if token else {}
        )
        return conn.getresponse().status
    finally:
        conn.close()


def test_default_serve_makes_a_private_token_and_prints_it_once(layout, cli):
    """A plain `loopx serve` needs a token it made (0600 in the root), printed once in the URL."""
    seed(layout)
    proc = _serve(cli)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().split()[4]
        where = proc.stdout.readline()
        token = urlsplit(url).fragment.removeprefix("token=")
        path = Path(cli.root) / "serve.token"
        assert str(path) in where
        assert path.read_text().strip() == token and len(token) >= 32
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        assert _status_of(url, None) == 401
        assert _status_of(url, token) == 200
        cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes()
        assert token.encode() not in cmdline
    finally:
        code, _ = _stop(proc)
    assert code == 0
    again = _serve(cli)  # the next serve keeps the stored token, so a bookmark still works
    try:
        assert again.stdout is not None
        assert urlsplit(again.stdout.readline().split()[4]).fragment == f"token={token}"
    finally:
        _stop(again)


def test_token_file_and_environment(layout, cli, tmp_path):
    """--token-file FILE (0600) and LOOPX_SERVE_TOKEN name the token; a readable file is refused."""
    seed(layout)
    file = tmp_path / "tok"
    file.write_text("file-token-abcdefghijkl\n")
    file.chmod(0o644)
    refused = cli.run("serve", "--port", "0", "--token-file", str(file))
    assert refused.returncode == 2 and "chmod 600" in refused.stderr
    file.chmod(0o600)
    for args, env, token in (
        (("--token-file", str(file)), {}, "file-token-abcdefghijkl"),
        ((), {"LOOPX_SERVE_TOKEN": "env-token-abcdefghijklm"}, "env-token-abcdefghijklm"),
    ):
        proc = _serve(cli, *args, env=env)
        try:
            assert proc.stdout is not None
            url = proc.stdout.readline().split()[4]
            assert _status_of(url, token) == 200
            assert _status_of(url, "wrong") == 401
        finally:
            _stop(proc)
    assert not (Path(cli.root) / "serve.token").exists()


def test_no_token_is_allowed_on_loopback_with_a_warning(layout, cli):
    """--no-token serves openly on loopback, and says so on stderr."""
    seed(layout)
    proc = _serve(cli, "--no-token")
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().split()[4]
        assert _status_of(url, None) == 200
    finally:
        code, err = _stop(proc)
    assert code == 0 and "warning: no token" in err


def test_actions_refuse_no_token(cli):
    """--actions with --no-token is refused before binding."""
    proc = cli.run("serve", "--port", "0", "--no-token", "--actions")
    assert proc.returncode == 2 and "actions" in proc.stderr


def test_accepted_connections_send_small_replies_at_once() -> None:
    """TCP_NODELAY on every accepted socket, as asyncio sets it for a listener that says TCP.

    Without it a reply written in two pieces (headers, then a small body) held the body
    until the client acknowledged the headers: 40 ms a request on Linux.
    """
    from loopx.web.server import _listen

    async def accept_one() -> int:
        accepted: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        class Recorder(asyncio.Protocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                sock = transport.get_extra_info("socket")
                accepted.set_result(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))

        listener = _listen("127.0.0.1", 0)
        port = listener.getsockname()[1]
        server = await asyncio.get_running_loop().create_server(Recorder, sock=listener)
        async with server:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            try:
                return await asyncio.wait_for(accepted, timeout=30)
            finally:
                writer.close()

    assert asyncio.run(accept_one()) != 0
