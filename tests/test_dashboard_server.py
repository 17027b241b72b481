"""The dashboard's HTTP side: page and assets, JSON API, live events, actions, deadlines."""

from __future__ import annotations

import http.client
import json
import socket
import time
from collections.abc import Iterator

import pytest

from loopx.api._serve import action_calls
from loopx.model import utcnow
from loopx.registry.goalrecords import GoalStatus
from loopx.registry.goals import get_goal
from loopx.root.hints import note_goal_changed
from loopx.state import load_state
from loopx.testing.dashboard_fixtures import seed_fleet_root
from loopx.testing.status_fixtures import append_history, history_line
from loopx.web.actions import audit_file, cross_site_reason
from loopx.web.bind import ActionsNeedTokenError
from loopx.web.server import HttpServer, make_server
from tests.test_server import running

TOKEN = "dash-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
JSON_AUTH = {**AUTH, "Content-Type": "application/json"}


@pytest.fixture
def server(layout, tmp_path) -> Iterator[HttpServer]:
    seed_fleet_root(layout, 30, now=utcnow(), workdir=tmp_path)
    yield from running(
        make_server(
            layout,
            port=0,
            token=TOKEN,
            actions=action_calls(layout),
            refresh_interval_s=0.2,
            ttl_s=0.0,
            request_timeout_s=2.0,
        )
    )


@pytest.fixture
def readonly(layout, tmp_path) -> Iterator[HttpServer]:
    seed_fleet_root(layout, 12, now=utcnow(), workdir=tmp_path)
    yield from running(make_server(layout, port=0, refresh_interval_s=0.2, ttl_s=0.0))


def call(server, method, path, headers=None, body=None):
    host, port = server.server_address[:2]
    conn = http.client.HTTPConnection(host, port, timeout=30)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        data = resp.read()
        kind = resp.getheader("Content-Type") or ""
        return resp.status, json.loads(data) if data and kind.startswith(
            "application/json"
        ) else data
    finally:
        conn.close()


def answer(server, goal_id, headers, body=b'{"answer": "merge it", "gate_id": 1}'):
    return call(server, "POST", f"/api/goals/{goal_id}/resolve-gate", headers, body)


def audit_lines(layout):
    path = audit_file(layout)
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


# --- page and API ------------------------------------------------------------------------------


def test_page_and_assets_need_no_token(server):
    """`/` and its assets hold no data and load without the token, with a strict CSP."""
    host, port = server.server_address[:2]
    conn = http.client.HTTPConnection(host, port, timeout=10)
    conn.request("GET", "/")
    resp = conn.getresponse()
    body = resp.read()
    assert resp.status == 200
    assert b"/static/dashboard.js" in body
    assert "script-src 'self'" in resp.getheader("Content-Security-Policy")
    conn.close()
    assert call(server, "GET", "/static/dashboard.js")[0] == 200
    assert call(server, "GET", "/static/../server.py")[0] == 401  # not an asset: needs the token


def test_api_needs_the_token(server):
    """Every data route refuses a request without the bearer token."""
    for path in ("/api/overview", "/api/goals", "/api/goals/goal-00000", "/events"):
        assert call(server, "GET", path)[0] == 401


def test_overview_puts_humans_first(server):
    """The overview lists gates and failing goals, the agents next, and the fleet."""
    status, doc = call(server, "GET", "/api/overview", AUTH)
    assert status == 200
    assert doc["actions"] is True
    humans = {g["goal_id"]: g["reason"] for g in doc["humans"]}
    assert humans["goal-00000"] == "gate_pending"
    assert humans["goal-00005"] == "failing"
    assert {g["reason"] for g in doc["next_up"]} <= {"running", "ready"}
    running_agents = {a["agent_id"]: a["goal_id"] for a in doc["agents"] if a["goal_id"]}
    assert running_agents == {"agent-1": "goal-00001", "agent-2": "goal-00002"}
    assert all(a["turn_since"] for a in doc["agents"] if a["goal_id"])


def test_goals_page_filters_and_pages(server):
    """`/api/goals` filters by actor, reason and text and pages the result."""
    _, doc = call(server, "GET", "/api/goals?reason=gate_pending", AUTH)
    assert [r["goal_id"] for r in doc["rows"]] == ["goal-00000", "goal-00010", "goal-00020"]
    _, doc = call(server, "GET", "/api/goals?q=SERVICE%2017&limit=5", AUTH)
    assert [r["goal_id"] for r in doc["rows"]] == ["goal-00017"]
    _, doc = call(server, "GET", "/api/goals?actor=agent&limit=4&offset=4", AUTH)
    assert doc["page"]["offset"] == 4
    assert len(doc["rows"]) == 4
    assert doc["page"]["total"] == 19  # 30 less 5 for humans, 3 waiting, 3 done
    assert call(server, "GET", "/api/goals?reason=bogus", AUTH)[0] == 400


def test_goal_detail_and_run_log(server):
    """One goal: view, policy, state and turns newest first; its run log as markdown."""
    status, doc = call(server, "GET", "/api/goals/goal-00005", AUTH)
    assert status == 200
    assert (doc["view"]["reason"], doc["goal"]["id"]) == ("failing", "goal-00005")
    assert [t["seq"] for t in doc["turns"]] == [3, 2, 1]
    assert [t["has_log"] for t in doc["turns"]] == [True, False, False]
    status, log = call(server, "GET", "/api/goals/goal-00005/runs/3", AUTH)
    assert status == 200
    assert "AssertionError" in log["markdown"]
    assert call(server, "GET", "/api/goals/goal-00005/runs/9", AUTH)[0] == 404
    assert call(server, "GET", "/api/goals/..%2Fx", AUTH)[0] == 404


# --- actions -----------------------------------------------------------------------------------


def test_answer_gate_resolves_it_and_is_audited(server, layout):
    """A gate answered over HTTP is resolved by the CLI's function and written to the audit log."""
    status, doc = answer(server, "goal-00000", JSON_AUTH)
    assert status == 200
    assert doc["gate"]["answer"] == "merge it"
    gate = load_state(layout, "goal-00000").gates[0]
    assert (gate.answer, gate.resolved_at is not None) == ("merge it", True)
    [record] = audit_lines(layout)
    assert (record["action"], record["goal_id"], record["outcome"], record["answer"]) == (
        "resolve-gate",
        "goal-00000",
        "applied",
        "merge it",
    )
    status, doc = call(server, "GET", "/api/goals/goal-00000", AUTH)
    assert doc["view"]["reason"] != "gate_pending"  # the action refreshed the snapshot


def test_pause_resume_done(server, layout):
    """Pause, resume and done change the registry status like `loopx goal pause|resume|done`."""
    for action, expected in (
        ("pause", GoalStatus.PAUSED),
        ("resume", GoalStatus.ACTIVE),
        ("done", GoalStatus.DONE),
    ):
        status, _ = call(server, "POST", f"/api/goals/goal-00003/{action}", JSON_AUTH, b"{}")
        assert status == 200
        assert get_goal(layout, "goal-00003").status is expected


def test_library_errors_reach_the_page(server, layout):
    """The CLI's error (no open gate, no such goal) comes back with its hint, and is audited."""
    status, doc = answer(server, "goal-00003", JSON_AUTH)
    assert status == 409
    assert "gate 1 does not exist" in doc["error"]
    assert "no gate of this goal is open" in doc["hint"]
    assert answer(server, "nope", JSON_AUTH)[0] == 404
    assert [r["outcome"] for r in audit_lines(layout)] == ["failed", "failed"]


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({"Content-Type": "application/json"}, 401),
        ({"Content-Type": "application/json", "Authorization": "Bearer wrong"}, 401),
        ({"Content-Type": "application/json", "Cookie": f"token={TOKEN}"}, 401),
        ({**JSON_AUTH, "Origin": "https://evil.example"}, 403),
        ({**JSON_AUTH, "Sec-Fetch-Site": "cross-site"}, 403),
        ({**AUTH, "Content-Type": "text/plain"}, 415),
    ],
)
def test_actions_refused(server, layout, headers, status):
    """No token, a wrong token, a cookie, a cross-site request or a form body: refused, audited."""
    assert answer(server, "goal-00000", headers)[0] == status
    assert load_state(layout, "goal-00000").gates[0].answer is None
    assert [r["outcome"] for r in audit_lines(layout)] == ["refused"]


def test_same_origin_browser_request_allowed(server, layout):
    """A same-origin request (the dashboard itself) with the token is accepted."""
    host, port = server.server_address[:2]
    headers = {**JSON_AUTH, "Origin": f"http://{host}:{port}", "Sec-Fetch-Site": "same-origin"}
    assert answer(server, "goal-00000", headers)[0] == 200


def test_readonly_server_refuses_actions_and_writes_nothing(readonly, layout):
    """Without --actions every action is a 403 and no audit file appears."""
    status, doc = answer(readonly, "goal-00000", {"Content-Type": "application/json"})
    assert status == 403
    assert "--actions" in doc["hint"]
    assert not audit_file(layout).exists()
    assert call(readonly, "POST", "/status", {}, b"{}")[0] == 405


def test_actions_need_a_token(layout):
    """Actions are never enabled without a token."""
    with pytest.raises(ActionsNeedTokenError):
        make_server(layout, port=0, actions=action_calls(layout))


def test_cross_site_reason_rules():
    """Same origin passes; another origin, a null origin or a cross-site fetch is named."""
    assert cross_site_reason("same-origin", "http://h:1", "h:1") is None
    assert cross_site_reason(None, None, "h:1") is None  # curl: judged by the token alone
    assert "cross-site" in cross_site_reason("cross-site", None, "h:1")
    assert "not this server" in cross_site_reason(None, "http://other:1", "h:1")
    assert "null" in cross_site_reason(None, "null", "h:1")


# --- live events -------------------------------------------------------------------------------


def read_event(sock_file, wanted: str, deadline: float) -> dict:
    event = None
    while time.monotonic() < deadline:
        line = sock_file.readline().decode()
        if line.startswith("event:"):
            event = line.split(":", 1)[1].strip()
        elif line.startswith("data:") and event == wanted:
            return json.loads(line.split(":", 1)[1])
    raise AssertionError(f"no {wanted} event before the deadline")


def test_committed_turn_arrives_as_an_event(server, layout):
    """A history line noted by its writer reaches /events, naming only that goal.

    (How fast is measured by benchmarks/dashboard.py; here the wait is bounded at 10 s.)
    """
    host, port = server.server_address[:2]
    sock = socket.create_connection((host, port), timeout=10)
    try:
        head = (
            f"GET /events HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {TOKEN}\r\n\r\n"
        )
        sock.sendall(head.encode())
        stream = sock.makefile("rb")
        assert stream.readline().startswith(b"HTTP/1.1 200")
        hello = read_event(stream, "hello", time.monotonic() + 10)
        started = time.monotonic()
        line = history_line("goal-00004", 4, ended_at=utcnow())
        append_history(layout, [line])  # append_record does not hint; the writer's hint follows
        note_goal_changed(layout, "goal-00004")
        event = read_event(stream, "change", started + 10)
        assert event["seq"] > hello["seq"]
        assert event["changed"] == ["goal-00004"]
        assert event["all"] is False
        assert event["counts"]["total"] == 30
    finally:
        sock.close()


# --- request deadline --------------------------------------------------------------------------


def test_trickling_headers_are_cut_at_the_request_deadline(server):
    """One header byte every 0.3 s: the connection is closed at the 2 s request deadline."""
    host, port = server.server_address[:2]
    sock = socket.create_connection((host, port), timeout=10)
    started = time.monotonic()
    closed_at = None
    try:
        sock.sendall(b"GET /healthz HTTP/1.1\r\n")
        for byte in b"X-Slow: " + b"a" * 60:
            try:
                sock.sendall(bytes([byte]))
            except OSError:
                closed_at = time.monotonic()
                break
            sock.settimeout(0.3)
            try:
                if sock.recv(1024) == b"":
                    closed_at = time.monotonic()
                    break
            except TimeoutError:
                continue
    finally:
        sock.close()
    assert closed_at is not None, "the server kept a trickling client past 18 s"
    # Cut near the 2 s deadline (slack for a loaded machine), long before the 18 s a
    # per-read timeout would have allowed.
    assert closed_at - started < 12.0


def test_slow_body_is_cut_at_the_request_deadline(server, layout):
    """An action whose body never completes is cut off, and changes nothing."""
    host, port = server.server_address[:2]
    sock = socket.create_connection((host, port), timeout=10)
    started = time.monotonic()
    try:
        head = (
            f"POST /api/goals/goal-00000/resolve-gate HTTP/1.1\r\nHost: {host}:{port}\r\n"
            f"Authorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n"
            "Content-Length: 100\r\n\r\n{"
        )
        sock.sendall(head.encode())
        assert sock.recv(1024) == b""  # closed without a reply once the deadline passed
    finally:
        sock.close()
    assert time.monotonic() - started < 9.0  # the 2 s deadline, with slack for a loaded machine
    assert load_state(layout, "goal-00000").gates[0].answer is None


def test_head_on_events_does_not_stream(server):
    """HEAD /events answers the headers and ends, without holding a stream open."""
    status, body = call(server, "HEAD", "/events", AUTH)
    assert (status, body) == (200, b"")


# --- answers land on the gate the person saw ---------------------------------------------------


def two_gates(layout, goal_id="goal-00003"):
    from loopx.registry.goals import open_gate

    first = open_gate(layout, goal_id, "Drop the staging database?", now=utcnow())
    second = open_gate(layout, goal_id, "May I email the customers?", now=utcnow())
    return first, second


def post(server, goal_id, action, doc):
    return call(server, "POST", f"/api/goals/{goal_id}/{action}", JSON_AUTH, json.dumps(doc))


def test_a_stale_answer_is_409_with_the_current_question(server, layout):
    """Tab A answers gate 1; tab B's answer for gate 1 is refused with gate 2's question."""
    first, second = two_gates(layout)
    a = {"answer": "yes, drop staging", "gate_id": first.id, "question": first.question}
    assert post(server, "goal-00003", "resolve-gate", a)[0] == 200
    b = {"answer": "no", "gate_id": first.id, "question": first.question}
    status, doc = post(server, "goal-00003", "resolve-gate", b)
    assert status == 409
    assert (doc["gate_id"], doc["current_gate"]["id"]) == (first.id, second.id)
    assert second.question in doc["hint"]
    gates = load_state(layout, "goal-00003").gates
    assert [(g.id, g.answer) for g in gates] == [(first.id, "yes, drop staging"), (second.id, None)]


def test_an_answer_to_a_changed_question_is_refused(server, layout):
    """The question the person read must still be the gate's: otherwise 409, nothing written."""
    first, _ = two_gates(layout)
    doc = {"answer": "yes", "gate_id": first.id, "question": "Something else?"}
    assert post(server, "goal-00003", "resolve-gate", doc)[0] == 409
    assert load_state(layout, "goal-00003").gates[0].answer is None


def test_the_same_answer_twice_is_applied_once(server, layout):
    """A double click: the second identical answer is 200 "repeated" and writes nothing."""
    first, _ = two_gates(layout)
    doc = {"answer": "yes", "gate_id": first.id, "question": first.question}
    assert post(server, "goal-00003", "resolve-gate", doc)[0] == 200
    before = layout.state_file("goal-00003").read_bytes()
    status, again = post(server, "goal-00003", "resolve-gate", doc)
    assert (status, again["repeated"]) == (200, True)
    assert layout.state_file("goal-00003").read_bytes() == before


def test_pausing_twice_writes_once(server, layout):
    """Pause on a paused goal is 200 "repeated" and leaves the goal file alone."""
    assert post(server, "goal-00003", "pause", {})[0] == 200
    goal_file = layout.root / "goals" / "goal-00003" / "goal.json"
    before = goal_file.read_bytes()
    status, doc = post(server, "goal-00003", "pause", {})
    assert (status, doc["repeated"], goal_file.read_bytes()) == (200, True, before)


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (b'{"answer": "yes"}', "say which gate"),
        (b"{not json", "not valid JSON"),
        (json.dumps({"answer": "x" * 4001, "gate_id": 1}).encode(), "longer than 4000"),
        (b'{"answer": "yes", "gate_id": 1, "colour": "red"}', "'colour' is not a field"),
        (b'{"answer": "yes", "gate_id": "first"}', "gate_id must be a whole number"),
        (b'{"answer": "", "gate_id": 1}', "answer must not be empty"),
    ],
)
def test_refusals_are_sentences(server, body, words):
    """A bad body is a 400 whose message names the problem, never pydantic's report."""
    status, doc = call(server, "POST", "/api/goals/goal-00000/resolve-gate", JSON_AUTH, body)
    assert status == 400
    assert words in doc["error"]
    assert "validation error" not in doc["error"]


def test_a_turn_in_flight_shows_running_however_short(server, layout):
    """A live heartbeat naming a turn makes its goal `running` at once, with the agent and turn."""
    from loopx.fleet import AgentHeartbeat, AgentPhase
    from loopx.storage.files import atomic_write_model

    now = utcnow()
    beat = AgentHeartbeat(
        agent_id="agent-9",
        pid=1,
        pid_started_at=0.0,
        hostname="h",
        phase=AgentPhase.RUNNING,
        goal_id="goal-00004",
        turn_key="goal-00004-5-2",
        turn_started_at=now,
        started_at=now,
        beat_at=now,
    )
    atomic_write_model(layout.agent_file("agent-9"), beat)
    _, page = call(server, "GET", "/api/goals?q=goal-00004", AUTH)
    [row] = page["rows"]
    assert (row["reason"], row["agent_id"]) == ("running", "agent-9")
    _, doc = call(server, "GET", "/api/goals/goal-00004", AUTH)
    assert doc["running"]["turn_key"] == "goal-00004-5-2"
    _, overview = call(server, "GET", "/api/overview", AUTH)
    [agent] = [a for a in overview["agents"] if a["agent_id"] == "agent-9"]
    assert agent["turn_since"] is not None and agent["turn_key"] == "goal-00004-5-2"


def test_the_audit_log_is_served_newest_first(server, layout):
    """`/api/audit` lists each attempt, applied or refused, newest first, with its answer."""
    assert answer(server, "goal-00000", JSON_AUTH)[0] == 200
    assert answer(server, "goal-00000", {**JSON_AUTH, "Origin": "https://evil.example"})[0] == 403
    status, doc = call(server, "GET", "/api/audit?limit=10", AUTH)
    assert status == 200
    assert [(r["outcome"], r["answer"]) for r in doc["records"]] == [
        ("refused", None),
        ("applied", "merge it"),
    ]
    assert call(server, "GET", "/api/audit")[0] == 401
