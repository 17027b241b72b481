"""The supervisor's own health as an event: down, crash loop and disk are Needs-you items and messages.

A real supervisor is SIGKILLed; ``loopx status`` (the projection the dashboard
reads too) names it down, ``loopx serve`` sends one "down" to a webhook on
127.0.0.1, and the restarted supervisor one "running again". Without a server,
the restarted supervisor sends the pair itself.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from loopx.fleet import AgentSlot, FleetRecord, FleetState
from loopx.notify.events import conditions
from loopx.notify.outbox import Outbox, record_events
from loopx.status.fleetview import FleetLiveness, fleet_view
from loopx.status.view import IncidentKind, StatusCounts, StatusProjection
from tests.fleet_helpers import (
    add_demo_goal,
    clean_env,
    cli,
    kill_everything,
    running_record,
    start_supervisor,
    wait_for,
)
from tests.test_notify_delivery import Receiver

FAST = ("--refresh-interval-seconds", "0.2", "--status-projection-cache-ttl-seconds", "0")
NOW = datetime(2026, 12, 6, 8, 0, tzinfo=UTC)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


def _record(**update: object) -> FleetRecord:
    base = FleetRecord(
        pid=4242,
        pid_started_at=1.0,
        hostname="h",
        agents_wanted=1,
        started_at=NOW,
        updated_at=NOW,
        slots=[AgentSlot(index=1, agent_id="agent-1")],
    )
    return base.model_copy(update=update)


def test_a_dead_supervisor_a_crash_loop_and_a_disk_limit_are_incidents() -> None:
    """The fleet view names each, with what to do; a clean stop or a live one names nothing."""
    dead = fleet_view(_record(), [], now=NOW, live=FleetLiveness(supervisor_alive=False))
    assert [i.kind for i in dead.incidents] == [IncidentKind.SUPERVISOR_DOWN]
    assert "pid 4242" in dead.incidents[0].explanation
    assert "loopx supervisor start" in dead.incidents[0].explanation
    looping = _record(slots=[AgentSlot(index=1, agent_id="agent-1", crash_loop=True)])
    disk = FleetLiveness(supervisor_alive=True, degraded="free space 10 MB, below the floor")
    view = fleet_view(looping, [], now=NOW, live=disk)
    assert [i.kind for i in view.incidents] == [IncidentKind.CRASH_LOOP, IncidentKind.DISK]
    stopped = _record(state=FleetState.STOPPED)
    assert (
        fleet_view(stopped, [], now=NOW, live=FleetLiveness(supervisor_alive=False)).incidents == []
    )
    live = FleetLiveness(supervisor_alive=True)
    assert fleet_view(_record(), [], now=NOW, live=live).incidents == []


def test_an_incident_that_ends_is_one_recovered_message() -> None:
    """Down, then up: one "down" event, then one "recovered"; a goal's condition ending is none."""
    targets = {"t": {"supervisor", "done"}}

    def projection(alive: bool, at: datetime) -> StatusProjection:
        fleet = fleet_view(_record(), [], now=at, live=FleetLiveness(supervisor_alive=alive))
        return StatusProjection(generated_at=at, checked_at=at, counts=StatusCounts(), fleet=fleet)

    outbox, _ = record_events(Outbox(), {}, targets, now=NOW)
    sent = []
    for minute, alive in enumerate([True, False, False, True, True]):
        at = NOW + timedelta(minutes=minute)
        outbox, new = record_events(outbox, conditions(projection(alive, at)), targets, now=at)
        sent += new
    assert [(e.id, e.severity.value) for e in sent] == [
        ("supervisor:down", "failure"),
        ("recovered:supervisor:down", "success"),
    ]


def _serve(root: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "loopx", "--root", str(root), "serve", "--no-token", "--port", "0",
         "--refresh-interval-seconds", "0.2", "--status-projection-cache-ttl-seconds", "0"],
        env=clean_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip


def _titles(r: Receiver) -> list[str]:
    with r.lock:
        return [line for b in r.bodies for line in b["message"].splitlines() if line[:2] == "- "]


def _start(root: Path) -> subprocess.Popen[bytes]:
    proc = start_supervisor(root, "--agents", "1", *FAST)
    wait_for("the supervisor to run", lambda: running_record(root, proc.pid, 1), timeout=30)
    return proc


def test_killing_the_supervisor_is_one_down_and_one_recovered_while_serve_runs(
    root: Path, tmp_path: Path, receiver: Receiver
) -> None:
    """SIGKILL: status and the page's projection say down, serve sends it; a restart, "running again"."""
    add_demo_goal(root, "g1", tmp_path / "wd", "--steps", "1000")
    done = cli(root, "notify", "add", receiver.url, "--events", "supervisor")
    assert done.returncode == 0, done.stderr
    serve = _serve(root)
    first = second = None
    try:
        first = _start(root)
        first.kill()
        first.wait()
        status = json.loads(cli(root, "status", "--json").stdout)
        assert [i["kind"] for i in status["fleet"]["incidents"]] == ["supervisor_down"]
        assert "needs you: supervisor_down" in cli(root, "status").stdout
        wait_for("the down message", lambda: _titles(receiver), timeout=20)
        second = _start(root)
        wait_for("the recovered message", lambda: len(_titles(receiver)) >= 2, timeout=20)
        status = json.loads(cli(root, "status", "--json").stdout)
        assert status["fleet"]["incidents"] == []
    finally:
        serve.terminate()
        serve.wait(timeout=30)
        kill_everything(root, *(p for p in (first, second) if p is not None))
    titles = _titles(receiver)
    assert [t.split(":")[0] for t in titles] == [
        "- the supervisor is down",
        "- the supervisor is running again",
    ]
    assert set(receiver.posts.values()) == {1}
    assert [b["type"] for b in receiver.bodies] == ["failure", "success"]


def test_a_restarted_supervisor_tells_of_its_predecessors_death_when_nobody_did(
    root: Path, tmp_path: Path, receiver: Receiver
) -> None:
    """No server ran: the restarted supervisor sends the "down" and "recovered" pair, once."""
    add_demo_goal(root, "g1", tmp_path / "wd", "--steps", "1000")
    done = cli(root, "notify", "add", receiver.url, "--events", "supervisor")
    assert done.returncode == 0, done.stderr
    first = second = None
    try:
        first = _start(root)
        first.kill()
        first.wait()
        second = _start(root)
        wait_for("the pair", lambda: len(_titles(receiver)) >= 2, timeout=20)
    finally:
        kill_everything(root, *(p for p in (first, second) if p is not None))
    titles = _titles(receiver)
    assert len(receiver.bodies) == 1
    assert [t.split(" (pid")[0].split(":")[0] for t in titles] == [
        "- the supervisor is down",
        "- the supervisor is running again",
    ]
    assert set(receiver.posts.values()) == {1}
