"""Delivery to webhook receivers of every speed: each event at least once, never more than twice.

The receiver is a thread with ``http.server`` on 127.0.0.1 (a port from the
OS) that answers after a delay, fails, or is down; it counts the POSTs per
event id (the comma-separated ``event_ids`` Apprise puts in the JSON body) and keeps their
``Idempotency-Key`` headers. The target's read timeout is set low (0.4 s) so
that "slower than the read timeout" takes a second, not the 15 s default. The
passes run in this process on a clock the test moves past each backoff; the
kill test SIGKILLs a real supervisor while its POST waits on the receiver.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from loopx.model import utcnow
from loopx.notify.deliver import apprise_url, run_notify
from loopx.notify.events import Severity, conditions, message
from loopx.notify.outbox import (
    DIGEST_WINDOW_S,
    MAX_UNKNOWN,
    Outbox,
    load_outbox,
    record_events,
)
from loopx.notify.targets import EventKind
from loopx.root import Layout
from loopx.status.view import StatusProjection
from tests.fleet_helpers import add_demo_goal, cli, kill_everything, start_supervisor, wait_for

RTO = 0.4  # the targets' read timeout here; a retry after an unknown try waits 4x as long
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


class Receiver:
    """A webhook that answers after ``delay`` s with ``status``; counts POSTs per event id."""

    def __init__(self, delay: float = 0.0, status: int = 200, port: int = 0) -> None:
        self.delay, self.status = delay, status
        self.fail_first = 0  # answer 500 to this many requests first
        self.drop = False  # read the request, then close the connection without an answer
        self.posts: Counter[str] = Counter()  # every POST, per event id
        self.taken: Counter[str] = Counter()  # POSTs answered 2xx, per event id
        self.keys: list[str] = []  # the Idempotency-Key of each POST
        self.bodies: list[dict[str, Any]] = []
        self.arrived = threading.Event()
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                data = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                body = json.loads(data)
                with outer.lock:
                    ids = body.get("event_ids", "").split(",")
                    outer.posts.update(ids)
                    outer.keys.append(self.headers.get("Idempotency-Key", ""))
                    outer.bodies.append(body)
                    status = 500 if outer.fail_first > 0 else outer.status
                    outer.fail_first -= 1
                    if status == 200:
                        outer.taken.update(ids)
                outer.arrived.set()
                if outer.drop:
                    self.close_connection = True
                    return
                time.sleep(outer.delay)
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_: object) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    @property
    def url(self) -> str:
        return f"json://127.0.0.1:{self.port}/hook"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receivers() -> Iterator[list[Receiver]]:
    made: list[Receiver] = []
    yield made
    for r in made:
        r.close()


def _projection(now: datetime, *gates: str) -> StatusProjection:
    at = now.isoformat()
    return StatusProjection.model_validate(
        {
            "generated_at": at,
            "checked_at": at,
            "counts": {},
            "fleet": {},
            "goals": [
                {
                    "goal_id": g,
                    "objective": g,
                    "goal_status": "active",
                    "priority": 0,
                    "actor": "human",
                    "reason": "gate_pending",
                    "explanation": f"{g} waits",
                    "gate_question": f"question of {g}",
                    "quota": QUOTA | {"window_start": at},
                }
                for g in gates
            ],
        }
    )


def _drive(layout: Layout, gates: list[str], *, until_s: float = 4000.0) -> Outbox:
    """Run passes on a clock moved to each next try, until nothing is pending (or ``until_s``)."""
    start = utcnow()
    now = start
    run_notify(layout, now=now, project=lambda: _projection(start))  # the baseline
    outbox = None
    while now - start < timedelta(seconds=until_s):
        at = now
        outbox = run_notify(layout, now=at, project=lambda: _projection(start, *gates))
        assert outbox is not None
        if not outbox.pending:
            return outbox
        now = max(now, min(p.next_try_at for p in outbox.pending)) + timedelta(seconds=0.01)
    assert outbox is not None
    return outbox


def _add(root: Path, url: str, *, timeout: float = RTO) -> None:
    done = cli(root, "notify", "add", url, "--events", "gate", "--read-timeout", str(timeout))
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(
    ("delay", "posts", "confirmed"),
    [
        (0.0, 1, True),  # answers at once
        (RTO / 2, 1, True),  # within the read timeout
        (RTO * 2, 2, True),  # slower than the read timeout, within the retry's longer one
        (RTO * 6, MAX_UNKNOWN, False),  # slower than both: given up as unconfirmed after 2
    ],
)
def test_each_event_arrives_and_never_more_than_twice_whatever_the_speed(  # noqa: PLR0917
    root: Path,
    layout: Layout,
    receivers: list[Receiver],
    delay: float,
    posts: int,
    confirmed: bool,
) -> None:
    """Every gate reaches the receiver; none is POSTed more than twice, and always under one key."""
    r = Receiver(delay)
    receivers.append(r)
    _add(root, r.url)
    outbox = _drive(layout, ["g1", "g2"])
    assert outbox.pending == []
    assert set(r.posts) == {s.event_key for s in outbox.sent}
    assert len(r.posts) == 2
    assert set(r.posts.values()) == {posts}
    # One message (both gates), resent under the same idempotency key: a receiver that
    # honours it takes each message once.
    assert len(set(r.keys)) == 1
    assert r.keys[0].startswith("loopx-")
    assert {s.confirmed for s in outbox.sent} == {confirmed}


def test_a_failing_receiver_gets_each_event_once_it_recovers(
    root: Path, layout: Layout, receivers: list[Receiver]
) -> None:
    """Error answers are retried with backoff until one goes through; it takes the message once."""
    r = Receiver()
    r.fail_first = 3
    receivers.append(r)
    _add(root, r.url)
    outbox = _drive(layout, ["g1"])
    assert outbox.pending == []
    assert list(r.taken.values()) == [1]
    assert list(r.posts.values()) == [4]
    assert outbox.sent[-1].attempts == 4


def test_a_receiver_that_drops_the_connection_gets_a_message_at_most_twice(
    root: Path, layout: Layout, receivers: list[Receiver]
) -> None:
    """A connection closed after the request went out: the fate is unknown, so two tries at most."""
    r = Receiver()
    r.drop = True
    receivers.append(r)
    _add(root, r.url)
    outbox = _drive(layout, ["g1"])
    assert outbox.pending == []
    assert list(r.posts.values()) == [MAX_UNKNOWN]
    assert [s.confirmed for s in outbox.sent] == [False]


def test_a_receiver_that_is_down_gets_each_event_once_it_is_up(
    root: Path, layout: Layout, receivers: list[Receiver]
) -> None:
    """Refused connections are retried with backoff; the receiver, once up, takes it once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    _add(root, f"json://127.0.0.1:{port}/hook")
    start = utcnow()
    run_notify(layout, now=start, project=lambda: _projection(start))
    for i in range(3):  # down: three tries refused
        outbox = run_notify(
            layout, now=start + timedelta(hours=i), project=lambda: _projection(start, "g1")
        )
        assert outbox is not None
        assert outbox.pending[0].unknown == 0
    r = Receiver(port=port)
    receivers.append(r)
    outbox = run_notify(
        layout, now=start + timedelta(hours=4), project=lambda: _projection(start, "g1")
    )
    assert outbox is not None
    assert outbox.pending == []
    assert list(r.posts.values()) == [1]


def test_the_message_names_its_events_and_is_typed_by_severity() -> None:
    """The id goes in the header, the body and the text; a gate is a warning, done a success."""
    now = utcnow()
    events = list(conditions(_projection(now, "g1")).values())
    assert events[0].severity is Severity.WARNING
    _, body = message(events, "http://h/")
    assert events[0].key in body
    url = apprise_url("json://h:1/hook?x=1", read_timeout_s=3, key="k1", event_keys=("a@1",))
    assert "rto=3" in url
    assert "retry=0" in url
    assert "%2BIdempotency-Key=k1" in url
    assert "%3Aevent_ids=a%401" in url
    assert "x=1" in url
    assert "Idempotency" not in apprise_url("ntfy://topic", read_timeout_s=3, key="k1")


def test_a_flapping_goal_is_one_message_per_window() -> None:
    """Five failures in half an hour: the first is sent, the next four are one digest."""
    start = utcnow()
    failing = _failing(start)
    outbox, _ = record_events(Outbox(), {}, {"t": {"failing"}}, now=start)
    sent = []
    for i in range(5):
        at = start + timedelta(minutes=5 * i)
        outbox, new = record_events(outbox, failing(at), {"t": {"failing"}}, now=at)
        sent += new
        outbox, _ = record_events(outbox, {}, {"t": {"failing"}}, now=at + timedelta(minutes=1))
    end = start + timedelta(seconds=DIGEST_WINDOW_S + 1)
    outbox, new = record_events(outbox, {}, {"t": {"failing"}}, now=end)
    sent += new
    assert [e.title for e in sent] == ["g1: failing", "g1: failing again (5 times in 30 min)"]
    assert {e.kind for e in sent} == {EventKind.FAILING}
    assert sent[0].key != sent[1].key
    assert "exit code 3: boom" in sent[1].body
    assert all(e.severity is Severity.FAILURE for e in sent)


def _failing(start: datetime) -> Any:
    def at(now: datetime) -> dict[str, Any]:
        iso = now.isoformat()
        projection = StatusProjection.model_validate(
            {
                "generated_at": iso,
                "checked_at": iso,
                "counts": {},
                "fleet": {},
                "goals": [
                    {
                        "goal_id": "g1",
                        "objective": "g1",
                        "goal_status": "active",
                        "priority": 0,
                        "actor": "human",
                        "reason": "failing",
                        "explanation": "2 turns failed in a row",
                        "quota": QUOTA | {"window_start": start.isoformat()},
                        "last_turn": {
                            "turn_key": "k",
                            "seq": 2,
                            "status": "failed",
                            "kind": None,
                            "failure": "host_exit",
                            "summary": "",
                            "next_action": None,
                            "ended_at": iso,
                            "failure_message": "exit code 3: boom",
                        },
                    }
                ],
            }
        )
        return conditions(projection)

    return at


def test_a_supervisor_killed_mid_post_resends_once_after_the_backoff(
    root: Path, tmp_path: Path, receivers: list[Receiver]
) -> None:
    """SIGKILL while the receiver holds the POST: one resend, same key, after the backoff."""
    r = Receiver(delay=30.0)  # holds the POST until the test is done with it
    receivers.append(r)
    add_demo_goal(root, "g1", tmp_path / "wd", "--steps", "1000")
    done = cli(root, "notify", "add", r.url, "--events", "gate", "--read-timeout", "20")
    assert done.returncode == 0, done.stderr
    proc = start_supervisor(
        root, "--agents", "1", "--refresh-interval-seconds", "0.2",
        "--status-projection-cache-ttl-seconds", "0",
    )  # fmt: skip
    try:
        wait_for("the baseline", lambda: load_outbox(Layout.at(root)).baselined, timeout=20)
        assert cli(root, "gate", "open", "g1", "--question", "ship?").returncode == 0
        wait_for("the POST", r.arrived.is_set, timeout=20)
        proc.kill()
        proc.wait()
    finally:
        kill_everything(root, proc)
    layout = Layout.at(root)
    journaled = load_outbox(layout).pending
    assert [(p.unknown, p.attempts) for p in journaled] == [(1, 1)]
    r.delay = 0.0
    # The next sender (a restarted supervisor, or serve) before the backoff: nothing is sent.
    from loopx.status.current import current_status, refresh_status

    def project() -> StatusProjection:
        refresh_status(layout, now=utcnow(), ttl_s=0.0)
        return current_status(layout, now=utcnow())

    run_notify(layout, now=utcnow(), project=project)
    assert sum(r.posts.values()) == 1
    # After it: the same message, once more, under the same key.
    later = journaled[0].next_try_at + timedelta(seconds=1)
    outbox = run_notify(layout, now=later, project=project)
    assert outbox is not None
    assert outbox.pending == []
    assert list(r.posts.values()) == [2]
    assert len(set(r.keys)) == 1
