"""A warm `loopx status --json` prints the stored snapshot, and only while it still holds."""

from __future__ import annotations

import json
import socket
from datetime import timedelta

import psutil

from loopx.cli import _status
from loopx.fleet import AgentHeartbeat, AgentPhase
from loopx.hints import note_goal_changed
from loopx.model import utcnow
from loopx.status.cache import DEFAULT_TTL_S
from loopx.status.refresh import StatusIndex
from loopx.status.snapshot import INDEX_SCHEMA_VERSION, snapshot_file
from loopx.status.view import Actor
from loopx.storage.files import atomic_write_model
from loopx.testing.status_fixtures import open_gate_state, register_goals, seed_goal, write_state

WARM = ("status", "--json", "--ttl", "3600")


def seed(layout):
    now = utcnow()
    goals = [seed_goal(layout, gid, now=now, history=2, workdir=layout.root) for gid in ("a", "b")]
    register_goals(layout, goals)


def test_a_warm_status_prints_the_bytes_the_cache_assembles(layout, cli):
    """The snapshot a cold run leaves is what the cache would print: same bytes, warm or not."""
    seed(layout)
    cold = cli.run("status", "--json", "--clear-cache", "--ttl", "3600", check=True).stdout
    assert snapshot_file(layout).exists()
    warm = cli.run(*WARM, check=True).stdout
    snapshot_file(layout).unlink()
    assembled = cli.run(*WARM, check=True).stdout  # no snapshot: from the cache's shards
    assert (warm, assembled) == (cold, cold)
    assert json.loads(warm)["counts"]["total"] == 2


def test_a_warm_status_imports_neither_pydantic_nor_structlog(layout, cli):
    """The warm path is the standard library only (issue 14: within 3x of a bare Python start)."""
    seed(layout)
    cli.run(*WARM, check=True)
    proc = cli.run(*WARM, check=True, PYTHONPROFILEIMPORTTIME="1")
    imported = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines()}
    assert "loopx.status.snapshot" in imported
    assert not {m for m in imported if m.split(".")[0] in {"pydantic", "structlog", "rich"}}


def test_a_changed_view_is_not_served_from_the_snapshot(layout, cli):
    """A refresh that re-projects a goal writes a new cache generation: the snapshot is stale."""
    seed(layout)
    assert json.loads(cli.run(*WARM, check=True).stdout)["goals"][0]["actor"] == "agent"
    write_state(layout, open_gate_state("b", "Deploy on Friday?", now=utcnow()))
    note_goal_changed(layout, "b")
    cli.run("refresh", check=True)
    doc = json.loads(cli.run(*WARM, check=True).stdout)
    assert (doc["goals"][0]["goal_id"], doc["goals"][0]["reason"]) == ("b", "gate_pending")


def test_a_new_heartbeat_is_shown_at_once(layout, cli):
    """The fleet is read afresh: an agent that started after the snapshot counts as alive."""
    seed(layout)
    assert json.loads(cli.run(*WARM, check=True).stdout)["fleet"]["agents_alive"] == 0
    now = utcnow()
    me = psutil.Process()
    beat = AgentHeartbeat(
        agent_id="agent-1",
        pid=me.pid,
        pid_started_at=me.create_time(),
        hostname=socket.gethostname(),
        phase=AgentPhase.IDLE,
        turns_done=0,
        started_at=now - timedelta(minutes=1),
        beat_at=now,
    )
    atomic_write_model(layout.agent_file("agent-1"), beat)
    assert json.loads(cli.run(*WARM, check=True).stdout)["fleet"]["agents_alive"] == 1
    # The same files and a process that still runs: the new snapshot is served as is.
    again = cli.run(*WARM, check=True, PYTHONPROFILEIMPORTTIME="1")
    assert json.loads(again.stdout)["fleet"]["agents_alive"] == 1
    assert "pydantic" not in again.stderr


def test_a_damaged_snapshot_is_ignored_and_replaced(layout, cli):
    """A torn or foreign snapshot is a cache miss, never an error."""
    seed(layout)
    good = cli.run(*WARM, check=True).stdout
    snapshot_file(layout).write_bytes(b'{"schema_version": 1, "generation"')
    assert cli.run(*WARM, check=True).stdout == good
    assert snapshot_file(layout).read_bytes().endswith(good.encode())


def test_the_cli_constants_match_the_kernel():
    """The CLI names the TTL and actors without importing the kernel; they must agree."""
    assert _status.DEFAULT_TTL_S == DEFAULT_TTL_S
    assert tuple(a.value for a in Actor) == _status.ACTORS


def test_the_snapshot_knows_the_index_schema():
    """The snapshot reads the cache index without its model; their schema versions must agree."""
    assert StatusIndex.model_fields["schema_version"].default == INDEX_SCHEMA_VERSION
