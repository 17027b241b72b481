"""Notifications end to end: a loopback webhook receiver, Apprise's json:// URL, a real supervisor.

The receiver is a thread with ``http.server`` on 127.0.0.1 started by the test;
the gates are opened with the real CLI; the supervisor is a real process,
killed with SIGKILL at a fault point between recording an event and sending it.
"""

from __future__ import annotations

import json
import os
import stat
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from loopx.model import utcnow
from loopx.notify.events import conditions, events_between, message
from loopx.notify.outbox import Outbox, record_events, record_result, record_try
from loopx.notify.targets import EventKind, redact_url
from loopx.status.view import StatusProjection
from tests.fleet_helpers import (
    add_demo_goal,
    cli,
    kill_everything,
    start_supervisor,
    supervisor,
    wait_for,
)

QUOTA: dict[str, Any] = {
    "compute": 1.0,
    "window_hours": 1.0,
    "allowance_wall_s": 60.0,
    "spent_wall_s": 0.0,
    "remaining_wall_s": 60.0,
    "cpu_allowance_s": None,
    "spent_cpu_s": 0.0,
    "spent_tokens": 0,
    "spent_cost_usd": 0.0,
    "turns_in_window": 0,
    "exhausted": None,
    "refills_at": None,
}
FAST = ("--refresh-interval-seconds", "0.2", "--status-projection-cache-ttl-seconds", "0")


class Receiver:
    """A webhook on 127.0.0.1 that keeps every JSON body it gets (and answers ``status``)."""

    def __init__(self, status: int = 200) -> None:
        self.status = status
        self.bodies: list[dict[str, Any]] = []
        self.requests = 0
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                data = self.rfile.read(length)
                with outer.lock:
                    outer.requests += 1
                    if outer.status == 200:
                        outer.bodies.append(json.loads(data))
                self.send_response(outer.status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_: object) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"json://127.0.0.1:{self.server.server_address[1]}/hook"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


def _setup(root: Path, tmp_path: Path, url: str, *goals: str) -> None:
    for goal in goals:
        add_demo_goal(root, goal, tmp_path / f"wd-{goal}", "--steps", "1000")
    done = cli(root, "notify", "add", url, "--events", "gate", "--link-base", "http://127.0.0.1:9/")
    assert done.returncode == 0, done.stderr


def _gate(root: Path, goal: str, question: str) -> int:
    done = cli(root, "gate", "open", goal, "--question", question, "--json")
    assert done.returncode == 0, done.stderr
    return int(json.loads(done.stdout)["gate"]["id"])


def test_a_gate_reaches_the_webhook_once_with_its_link(
    root: Path, tmp_path: Path, receiver: Receiver
) -> None:
    _setup(root, tmp_path, receiver.url, "g1")
    with supervisor(root, *FAST):
        gate = _gate(root, "g1", "may I drop staging?")
        wait_for("the notification", lambda: receiver.bodies, timeout=10)
        # Several more refreshes pass: nothing is sent again.
        wait_for("more refreshes", lambda: _outbox(root)["sent"], timeout=10)
        before = _refreshes(root)
        wait_for("two more passes", lambda: _refreshes(root) > before, timeout=10)
    assert len(receiver.bodies) == 1
    body = receiver.bodies[0]["message"]
    assert "may I drop staging?" in body
    assert "http://127.0.0.1:9/#/goal/g1" in body
    assert f"gate {gate}" in receiver.bodies[0]["title"]


def _outbox(root: Path) -> dict[str, Any]:
    try:
        return json.loads((root / "notify.d" / "outbox.json").read_text())
    except (FileNotFoundError, ValueError):
        return {"sent": [], "pending": []}


def _refreshes(root: Path) -> float:
    return (root / "notify.d" / "outbox.json").stat().st_mtime_ns + 0.0


def test_a_restart_between_the_event_and_its_delivery_sends_it_once(
    root: Path, tmp_path: Path, receiver: Receiver
) -> None:
    _setup(root, tmp_path, receiver.url, "g1")
    proc = start_supervisor(root, "--agents", "1", *FAST, LOOPX_FAULT="notify:recorded")
    try:
        _gate(root, "g1", "ship it?")
        # The first pass that records the event dies before sending it (the fault's 137).
        wait_for("the supervisor to die at the fault", lambda: proc.poll() is not None, timeout=30)
        assert [p["event"]["id"] for p in _outbox(root)["pending"]] == ["gate:g1:1"]
        assert receiver.bodies == []
    finally:
        kill_everything(root, proc)
    with supervisor(root, *FAST):
        wait_for("the notification", lambda: receiver.bodies, timeout=10)
        wait_for("the delivery recorded", lambda: not _outbox(root)["pending"], timeout=10)
    assert len(receiver.bodies) == 1
    assert "ship it?" in receiver.bodies[0]["message"]


def test_a_failing_receiver_is_retried_and_shows_in_status(
    root: Path, tmp_path: Path, receiver: Receiver
) -> None:
    receiver.status = 500
    _setup(root, tmp_path, receiver.url, "g1")
    with supervisor(root, *FAST):
        _gate(root, "g1", "again?")
        wait_for("retries", lambda: receiver.requests >= 2, timeout=20)
        listing = wait_for(
            "the failure in notify list",
            lambda: (
                (d := json.loads(cli(root, "notify", "list", "--json").stdout))["delivery"][
                    "failing_targets"
                ]
                and d
            ),
            timeout=20,
        )
        status = cli(root, "status")
        assert "notifications" in status.stdout
        assert "failing" in status.stdout
        receiver.status = 200
        # The backoff's next try delivers it (5 s after the first failure).
        wait_for("the delivery after the receiver recovered", lambda: receiver.bodies, timeout=30)
    assert listing["delivery"]["pending"] == 1
    assert "[REDACTED]" in listing["targets"][0]["url"]
    assert len(receiver.bodies) == 1
    # The URL's path (where a webhook keeps its secret) is in no log and no status.
    log = (root.parent / "supervisor.log").read_text()
    assert "notify_failed" in log
    assert "/hook" not in log
    assert "/hook" not in status.stdout
    assert "/hook" not in json.dumps(listing)


def test_many_events_at_once_are_one_message(
    root: Path, tmp_path: Path, receiver: Receiver
) -> None:
    _setup(root, tmp_path, receiver.url, "g1", "g2", "g3")
    for goal in ("g1", "g2", "g3"):
        _gate(root, goal, f"question of {goal}")
    with supervisor(root, *FAST):
        wait_for("the notification", lambda: receiver.bodies, timeout=10)
        wait_for("the delivery recorded", lambda: not _outbox(root)["pending"], timeout=10)
    assert len(receiver.bodies) == 1
    body = receiver.bodies[0]["message"]
    for goal in ("g1", "g2", "g3"):
        assert f"question of {goal}" in body
        assert f"#/goal/{goal}" in body


def test_urls_are_stored_0600_and_shown_redacted(root: Path, tmp_path: Path) -> None:
    add_demo_goal(root, "g1", tmp_path / "wd")
    secret = "slack://T0000/B0000/XXXXsecretXXXX"
    assert cli(root, "notify", "add", secret).returncode == 0
    path = root / "notify.json"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    shown = cli(root, "notify", "list").stdout + cli(root, "notify", "list", "--json").stdout
    assert "secret" not in shown
    assert "slack://T0000/[REDACTED]" in shown
    bad = cli(root, "notify", "add", "no-scheme")
    assert bad.returncode != 0
    assert "scheme" in bad.stderr
    bad = cli(root, "notify", "add", "json://x", "--events", "gate,nope")
    assert bad.returncode != 0
    assert "nope" in bad.stderr
    target = json.loads(cli(root, "notify", "list", "--json").stdout)["targets"][0]["id"]
    assert cli(root, "notify", "remove", target).returncode == 0
    assert json.loads(cli(root, "notify", "list", "--json").stdout)["targets"] == []


def test_redaction_keeps_only_the_scheme_and_host() -> None:
    assert (
        redact_url("json://u:pw@127.0.0.1:8/hook?x=1") == "json://[REDACTED]@127.0.0.1:8/[REDACTED]"
    )
    assert redact_url("ntfy://topic") == "ntfy://topic"
    assert redact_url("garbage") == "[REDACTED]"


def _projection(*goals: tuple[str, str]) -> StatusProjection:
    now = utcnow().isoformat()
    return StatusProjection.model_validate(
        {
            "generated_at": now,
            "checked_at": now,
            "counts": {},
            "fleet": {"degraded": "the disk is below the floor"},
            "goals": [
                {
                    "goal_id": g,
                    "objective": g,
                    "goal_status": "active",
                    "priority": 0,
                    "actor": "human",
                    "reason": reason,
                    "explanation": f"{g} is {reason}",
                    "quota": QUOTA | {"window_start": now},
                }
                for g, reason in goals
            ],
        }
    )


def test_events_are_what_the_current_projection_adds() -> None:
    before = _projection(("a", "ready"), ("b", "failing"))
    after = _projection(("a", "gate_pending"), ("b", "failing"), ("c", "done"))
    events = events_between(before, after, {"a": [(2, "why?")]})
    assert [e.id for e in events] == ["done:c", "gate:a:2"]
    assert {e.kind for e in events} == {EventKind.DONE, EventKind.GATE}
    assert "disk:fleet" in conditions(after)
    title, body = message(events, "http://h:1/")
    assert "2 need attention" in title
    assert "http://h:1/#/goal/a" in body


def test_the_outbox_baselines_then_records_and_retries() -> None:
    now = utcnow()
    current = conditions(_projection(("a", "gate_pending")))
    outbox, new = record_events(Outbox(), current, {"t": {"gate"}}, now=now)
    assert new == []
    assert outbox.active == ["disk:fleet", "gate:a:0"]
    later = conditions(_projection(("a", "gate_pending"), ("b", "done")))
    outbox, new = record_events(outbox, later, {"t": {"gate"}, "u": {"done"}}, now=now)
    assert [e.id for e in new] == ["done:b"]
    assert [(p.target_id, p.event.id) for p in outbox.pending] == [("u", "done:b")]
    keys = {p.event.key for p in outbox.pending}
    tried, _ = record_try(outbox, "u", list(outbox.pending), now=now)
    failed = record_result(tried, "u", keys, error="boom", now=now)
    assert failed.pending[0].attempts == 1
    assert failed.pending[0].next_try_at > now
    assert failed.failing_targets == ["u"]
    sent = record_result(failed, "u", keys, error=None, now=now)
    assert sent.pending == []
    assert sent.failing_targets == []
    assert [s.event_id for s in sent.sent] == ["done:b"]


def test_serve_sends_when_no_supervisor_runs_and_its_link_opens_the_gate(
    root: Path, tmp_path: Path, receiver: Receiver
) -> None:
    import subprocess
    import sys
    import urllib.request

    from tests.fleet_helpers import clean_env

    add_demo_goal(root, "g1", tmp_path / "wd", "--steps", "1000")
    assert cli(root, "notify", "add", receiver.url, "--events", "gate").returncode == 0
    serve = subprocess.Popen(
        [sys.executable, "-m", "loopx", "--root", str(root), "serve", "--no-token", "--port", "0",
         "--refresh-interval-seconds", "0.2", "--status-projection-cache-ttl-seconds", "0"],
        env=clean_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        base = wait_for(
            "serve's recorded address",
            lambda: (
                (p := root / "notify.d" / "serve.json").exists()
                and json.loads(p.read_text())["url"]
            ),
            timeout=30,
        )
        gate = _gate(root, "g1", "which region?")
        wait_for("the notification", lambda: receiver.bodies, timeout=10)
        body = receiver.bodies[0]["message"]
        link = f"{base}#/goal/g1"
        assert link in body
        # The link's page is the dashboard; the goal's document it loads holds the gate.
        with urllib.request.urlopen(link.split("#", maxsplit=1)[0], timeout=10) as page:
            assert page.status == 200
        with urllib.request.urlopen(f"{base}api/goals/g1", timeout=10) as reply:
            detail = json.loads(reply.read())
        gates = [g for g in detail["state"]["gates"] if g["answer"] is None]
        assert [(g["id"], g["question"]) for g in gates] == [(gate, "which region?")]
    finally:
        serve.terminate()
        serve.wait(timeout=30)
    assert len(receiver.bodies) == 1
    # Stopped, it lends its address no more: the links never point at a server that is gone.
    assert not (root / "notify.d" / "serve.json").exists()
    assert json.loads(cli(root, "notify", "list", "--json").stdout)["link_base"] is None


def test_a_limited_account_and_a_spent_budget_are_events() -> None:
    """An account's limit or spent budget is one event each, keyed by the account."""
    from datetime import UTC, datetime

    from loopx.accounts.records import AccountSummary, Condition
    from loopx.notify.events import conditions
    from loopx.status.view import FleetView, StatusCounts, StatusProjection

    now = datetime(2026, 12, 1, 19, 3, tzinfo=UTC)
    projection = StatusProjection(
        generated_at=now,
        checked_at=now,
        fleet=FleetView(),
        counts=StatusCounts(),
        accounts=[
            AccountSummary(name="work", host_kind="codex", state=Condition.LIMITED,
                           message="account work limited until 19:05:59 UTC"),
            AccountSummary(name="team", host_kind="claude", state=Condition.BUDGET_SPENT),
            AccountSummary(name="default-demo", host_kind="demo", state=Condition.OK),
        ],
    )  # fmt: skip
    found = conditions(projection)
    assert sorted(found) == ["budget:account:team", "limit:account:work"]
    assert found["limit:account:work"].body == "account work limited until 19:05:59 UTC"
