"""The dashboard's later panels over HTTP: failures, accounts, worktrees, bulk answers, timeline.

Every route here is also refused without the token and with a foreign ``Host``, and hostile
text comes back as JSON text, never markup.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import subprocess
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from loopx.api._serve import action_calls
from loopx.model import utcnow
from loopx.root import Layout
from loopx.state import GoalState
from loopx.storage.files import atomic_write_bytes
from loopx.testing.status_fixtures import append_history, make_goal, register_goals, write_state
from loopx.turn.historyline import HistoryLine
from loopx.usage import Usage
from loopx.web.server import HttpServer, make_server
from tests.test_server import running
from tests.turnkit import demo_goal, loopx

TOKEN = "panel-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
JSON_AUTH = {**AUTH, "Content-Type": "application/json"}
HOSTILE = '<img src=x onerror="window.pwned=1"><script>window.pwned=2</script>'


def call(server: HttpServer, method: str, path: str, headers=None, body=None):
    host, port = server.server_address[:2]
    conn = http.client.HTTPConnection(host, port, timeout=30)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        data = resp.read()
        kind = resp.getheader("Content-Type") or ""
        doc = json.loads(data) if data and kind.startswith("application/json") else data
        return resp.status, doc, kind
    finally:
        conn.close()


def failed_line(goal_id: str, seq: int, *, message: str, minutes_ago: float = 5) -> HistoryLine:
    end = utcnow() - timedelta(minutes=minutes_ago)
    return HistoryLine(
        turn_key=f"{goal_id}-{seq:06d}-{seq}",
        goal_id=goal_id,
        seq=seq,
        epoch=seq,
        agent_id="agent-1",
        status="failed",
        failure="host_exit",
        failure_message=message,
        usage=Usage(wall_s=30.0, cpu_s=1.0),
        started_at=end - timedelta(seconds=30),
        ended_at=end,
    )


def seed_failing(layout: Layout, goal_id: str, workdir: Path, *, message: str) -> None:
    """A goal whose last three turns failed with ``message``, each with a run log."""
    register_goals(layout, [make_goal(goal_id, now=utcnow(), workdir=workdir, objective=HOSTILE)])
    append_history(
        layout, [failed_line(goal_id, s, message=message, minutes_ago=30 - s) for s in (1, 2, 3)]
    )
    write_state(
        layout,
        GoalState(goal_id=goal_id, turn_seq=3, consecutive_failures=3, updated_at=utcnow()),
    )
    for seq in (1, 3):
        text = f"# {goal_id} turn {seq}\n\n- failure: `host_exit`: {message}\n"
        atomic_write_bytes(layout.runs_dir(goal_id) / f"{seq}.md", text.encode())


@contextlib.contextmanager
def _served(layout: Layout) -> Iterator[HttpServer]:
    yield from running(
        make_server(
            layout,
            port=0,
            token=TOKEN,
            actions=action_calls(layout),
            refresh_interval_s=0.2,
            ttl_s=0.0,
        )
    )


@pytest.fixture
def server(layout: Layout, tmp_path: Path) -> Iterator[HttpServer]:
    seed_failing(layout, "broken", tmp_path, message=f"the host exited with code 3: {HOSTILE}")
    with _served(layout) as served:
        yield served


# --- a failing goal's message and run log -----------------------------------------------------


def test_status_json_carries_the_failing_turns_message(layout, tmp_path):
    """A real failed turn: `status --json` has its message in last_turn.failure_message."""
    demo_goal(layout, "f", tmp_path / "work", "--fail")
    loopx(layout.root, "turn", "run-once", "f")
    status = loopx(layout.root, "status", "--json")
    assert status.returncode == 0, status.stderr
    [view] = [g for g in json.loads(status.stdout)["goals"] if g["goal_id"] == "f"]
    last = view["last_turn"]
    assert (last["status"], last["failure"]) == ("failed", "host_exit")
    assert "exit" in last["failure_message"]
    assert "failing on purpose" in last["failure_message"]  # the host's own stderr words
    warm = loopx(layout.root, "status", "--json")  # replayed from the memo: the same field
    assert json.loads(warm.stdout)["goals"][0]["last_turn"] == last


def test_the_failing_card_carries_the_message_as_text(server):
    """The overview's card and the table row carry the failure's message, as JSON text."""
    status, doc, _ = call(server, "GET", "/api/overview", AUTH)
    assert status == 200
    [card] = [g for g in doc["humans"] if g["goal_id"] == "broken"]
    assert card["reason"] == "failing"
    assert card["last_failure"] == "host_exit"
    assert card["failure_message"] == f"the host exited with code 3: {HOSTILE}"
    assert card["last_turn_seq"] == 3
    _, page, _ = call(server, "GET", "/api/goals?q=broken", AUTH)
    assert page["rows"][0]["failure_message"].endswith(HOSTILE)


def test_the_latest_run_log_is_served_as_json_text(server):
    """`/api/goals/<id>/runs/latest` is the newest run log, JSON-encoded, with the usual headers."""
    status, doc, kind = call(server, "GET", "/api/goals/broken/runs/latest", AUTH)
    assert (status, kind) == (200, "application/json")
    assert doc["seq"] == 3
    assert HOSTILE in doc["markdown"]  # text inside JSON; the page renders it as text nodes
    status, doc, _ = call(server, "GET", "/api/goals/nope/runs/latest", AUTH)
    assert status == 404


def test_the_latest_run_log_of_a_goal_without_one_is_404(server, layout, tmp_path):
    """A goal that never ran has no run log: 404 with a sentence."""
    register_goals(layout, [make_goal("fresh", now=utcnow(), workdir=tmp_path)])
    call(server, "POST", "/api/goals/fresh/pause", JSON_AUTH, b"{}")  # refreshes the snapshot
    status, doc, _ = call(server, "GET", "/api/goals/fresh/runs/latest", AUTH)
    assert (status, doc["error"]) == (404, "goal 'fresh' has no run log yet")


@pytest.mark.parametrize("path", ["/api/goals/broken/runs/latest", "/api/goals/broken/runs/3"])
def test_run_logs_need_the_token_and_a_known_host(server, path):
    """Run logs are refused without the token (401) and for a foreign Host (421)."""
    assert call(server, "GET", path)[0] == 401
    assert call(server, "GET", path, {**AUTH, "Host": "evil.example:8765"})[0] == 421


# --- accounts ---------------------------------------------------------------------------------


def seed_accounts(layout: Layout, workdir: Path) -> None:
    """`work` limited for two minutes (3 goals wait), `metered` with an estimated spend, and
    `authy` needing a human, its question carrying hostile text."""
    from loopx.accounts.accountfiles import state_file
    from loopx.accounts.accountstore import record_spend, write_account
    from loopx.accounts.records import (
        Account,
        AccountBudget,
        AccountGate,
        AccountState,
        Condition,
        Signal,
        TurnSignal,
    )
    from loopx.storage.files import atomic_write_model

    now = utcnow()
    for name, extra in (
        ("work", {}),
        (
            "metered",
            {
                "budget": AccountBudget(max_tokens=1_000_000, window_hours=24),
                "price_in_per_mtok": 3.0,
                "price_out_per_mtok": 15.0,
            },
        ),
        ("authy", {}),
    ):
        write_account(
            layout, Account(name=name, host_kind="demo", created_at=now, updated_at=now, **extra)
        )
    limited = AccountState(
        name="work",
        condition=Condition.LIMITED,
        until=now + timedelta(minutes=2),
        seen_by_goal="w0",
        seen_by_turn="w0-000001-1",
        proven=True,
    )
    atomic_write_model(state_file(layout, "work"), limited)
    gate = AccountGate(question=f"log in again: {HOSTILE}", opened_at=now, opened_by="a0-1-1")
    needs = AccountState(name="authy", condition=Condition.NEEDS_HUMAN, gate=gate, proven=True)
    atomic_write_model(state_file(layout, "authy"), needs)
    goals = [make_goal(f"w{i}", now=now, workdir=workdir, account="work") for i in range(3)]
    goals += [make_goal("m0", now=now, workdir=workdir, account="metered")]
    goals += [make_goal("a0", now=now, workdir=workdir, account="authy")]
    register_goals(layout, goals)
    turn = TurnSignal(
        account="metered",
        goal_id="m0",
        turn_key="m0-000001-1",
        signal=Signal.THROUGH,
        at=now,
        input_tokens=100_000,
        output_tokens=20_000,
    )
    record_spend(layout, turn)


def test_the_overview_shows_each_accounts_state_spend_and_waiting_goals(layout, tmp_path):
    """Limited until T with its waiting goals; an estimated spend flagged; a human's question."""
    seed_accounts(layout, tmp_path)
    with contextlib.ExitStack() as stack:
        server = stack.enter_context(_served(layout))
        status, doc, _ = call(server, "GET", "/api/overview", AUTH)
    assert status == 200
    rows = {a["name"]: a for a in doc["accounts"]}
    work, metered, authy = rows["work"], rows["metered"], rows["authy"]
    assert (work["state"], work["goals"], work["waiting"]) == ("limited", 3, 3)
    assert work["waiting_ids"] == ["w0", "w1", "w2"]
    assert work["until"] is not None and "limited until" in work["message"]
    assert metered["spend"]["tokens"] == 120_000
    assert metered["cost_estimated"] is True
    assert metered["spend"]["estimated_usd"] == pytest.approx(0.6)  # 0.1 M in x 3 + 0.02 M out x 15
    assert metered["budget"]["max_tokens"] == 1_000_000
    assert (authy["state"], authy["question"]) == ("needs_human", f"log in again: {HOSTILE}")


def test_an_account_row_names_at_most_twenty_waiting_goals():
    """An account holding 500 goals back costs the overview 20 ids and a count."""
    from loopx.accounts.records import AccountSummary, Condition
    from loopx.web.panels import account_row

    ids = [f"g{i:03d}" for i in range(500)]
    row = account_row(AccountSummary(name="big", state=Condition.LIMITED, goals=ids, waiting=ids))
    assert (row.goals, row.waiting, row.waiting_ids) == (500, 500, ids[:20])


# --- worktrees --------------------------------------------------------------------------------


def git(where: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-C", str(where), "-c", "user.email=t@example.com", "-c", "user.name=t", *args],
        check=True,
        capture_output=True,
    )


def worktree_goal(layout: Layout, tmp_path: Path, *, merge: bool) -> Path:
    """A --worktree goal run once by the real CLI, one commit made on its branch, merged or not."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "commit", "-q", "--allow-empty", "-m", "init")
    add = loopx(
        layout.root, "goal", "add", "wt", "--objective", "count", "--workdir", str(repo),
        "--host-kind", "demo", "--host", "--steps 1", "--worktree",
    )  # fmt: skip
    assert add.returncode == 0, add.stderr
    assert loopx(layout.root, "turn", "run-once", "wt").returncode == 0
    tree = layout.root / "worktrees" / "wt"
    (tree / "feature.txt").write_text("the work\n")
    git(tree, "add", "feature.txt")
    git(tree, "commit", "-q", "-m", "the work")
    if merge:
        merged = loopx(layout.root, "goal", "merge", "wt")
        assert merged.returncode == 0, merged.stderr
    return tree


@pytest.mark.parametrize("merge", [False, True])
def test_a_worktree_goal_shows_its_branch_folder_and_merge(layout, tmp_path, merge):
    """The goal page's worktree: branch loopx/<id>, its folder, commits ahead, the last merge."""
    tree = worktree_goal(layout, tmp_path, merge=merge)
    register_goals(layout, [make_goal("plain", now=utcnow(), workdir=tmp_path)])
    with _served(layout) as server:
        status, doc, _ = call(server, "GET", "/api/goals/wt", AUTH)
        _, plain, _ = call(server, "GET", "/api/goals/plain", AUTH)
    assert status == 200
    view = doc["worktree"]["view"]
    assert (view["branch"], view["path"], view["base"], view["exists"]) == (
        "loopx/wt",
        str(tree),
        "main",
        True,
    )
    merged = doc["worktree"]["merge"]
    if merge:
        assert (merged["outcome"], merged["step"]) == ("merged", "finished")
        assert view["ahead"] == 0  # the base holds the branch's commit now
    else:
        assert merged is None
        assert view["ahead"] == 1
    assert plain["worktree"] is None


# --- one answer for several gates -------------------------------------------------------------


def gated_goals(layout: Layout, workdir: Path) -> dict[str, int]:
    """g-a and g-b with one open gate each; g-c whose gate 1 was answered and gate 2 is open."""
    from loopx.registry.goals import open_gate, resolve_gate

    now = utcnow()
    register_goals(layout, [make_goal(g, now=now, workdir=workdir) for g in ("g-a", "g-b", "g-c")])
    ids = {g: open_gate(layout, g, f"Ship {g}? {HOSTILE}", now=now).id for g in ("g-a", "g-b")}
    stale = open_gate(layout, "g-c", "Ship g-c?", now=now)
    open_gate(layout, "g-c", "Email the customers?", now=now)
    resolve_gate(layout, "g-c", "no", now=now, gate_id=stale.id)
    return {**ids, "g-c": stale.id}


def seen_rows(server, path: str, wanted: set[str]) -> dict[str, dict]:
    """The rows of ``path`` once the server's refresher has seen every goal of ``wanted``."""
    deadline = time.monotonic() + 10
    while True:
        _, page, _ = call(server, "GET", path, AUTH)
        rows = {r["goal_id"]: r for r in page["rows"]}
        if wanted <= rows.keys():
            return rows
        assert time.monotonic() < deadline, f"the server never showed {wanted - rows.keys()}"
        time.sleep(0.1)


def bulk(server, doc, headers=JSON_AUTH):
    return call(server, "POST", "/api/answers", headers, json.dumps(doc).encode())


def test_one_answer_lands_on_each_gate_and_a_stale_one_gets_its_own_409(server, layout, tmp_path):
    """Three gates, one answer: two applied, the stale one refused with the question asked now."""
    from loopx.state import load_state
    from loopx.web.actions import audit_file

    ids = gated_goals(layout, tmp_path)
    rows = seen_rows(server, "/api/goals?reason=gate_pending&sort=id", {"g-a", "g-b", "g-c"})
    assert (rows["g-a"]["gate_id"], rows["g-b"]["gate_id"]) == (ids["g-a"], ids["g-b"])
    items = [
        {"goal_id": g, "gate_id": rows[g]["gate_id"], "question": rows[g]["gate_question"]}
        for g in ("g-a", "g-b")
    ] + [{"goal_id": "g-c", "gate_id": ids["g-c"], "question": "Ship g-c?"}]
    status, doc, _ = bulk(server, {"answer": "yes, ship", "gates": items})
    assert status == 200
    assert [(r["goal_id"], r["status"], r["outcome"]) for r in doc["results"]] == [
        ("g-a", 200, "applied"),
        ("g-b", 200, "applied"),
        ("g-c", 409, "stale"),
    ]
    assert (doc["applied"], doc["refused"]) == (2, 1)
    assert doc["results"][2]["current_gate"]["question"] == "Email the customers?"
    assert [load_state(layout, g).gates[0].answer for g in ("g-a", "g-b", "g-c")] == [
        "yes, ship",
        "yes, ship",
        "no",
    ]
    audit = [json.loads(x) for x in audit_file(layout).read_text().splitlines()]
    assert [(r["goal_id"], r["outcome"]) for r in audit] == [
        ("g-a", "applied"),
        ("g-b", "applied"),
        ("g-c", "failed"),
    ]
    again = bulk(server, {"answer": "yes, ship", "gates": items[:2]})[1]
    assert [r["outcome"] for r in again["results"]] == ["repeated", "repeated"]


@pytest.mark.parametrize(
    ("doc", "words"),
    [
        ({"answer": "yes", "gates": []}, "gates must not be empty"),
        ({"answer": "yes"}, "gates is missing"),
        ({"answer": "", "gates": [{"goal_id": "g-a", "gate_id": 1}]}, "answer must not be empty"),
        (
            {"answer": "y", "gates": [{"goal_id": "g", "gate_id": 1}] * 101},
            "gates has more than 100 items",
        ),
        ({"answer": "y", "gates": [{"goal_id": "g", "gate_id": "one"}]}, "must be a whole number"),
    ],
)
def test_a_bad_bulk_answer_is_a_sentence(server, doc, words):
    """A malformed bulk answer is a 400 naming the problem; nothing is answered."""
    status, reply, _ = bulk(server, doc)
    assert status == 400
    assert words in reply["error"]


def test_bulk_answers_are_refused_like_single_ones(server, layout, tmp_path):
    """No token 401, cross-site 403, foreign Host 421, oversized 413; a read-only server 403."""
    from loopx.state import load_state

    ids = gated_goals(layout, tmp_path)
    doc = {"answer": "yes", "gates": [{"goal_id": "g-a", "gate_id": ids["g-a"]}]}
    headers = {"Content-Type": "application/json"}
    assert bulk(server, doc, headers)[0] == 401
    assert bulk(server, doc, {**JSON_AUTH, "Origin": "https://evil.example"})[0] == 403
    assert bulk(server, doc, {**JSON_AUTH, "Host": "evil.example"})[0] == 421
    big = {
        "answer": "y" * 4000,
        "gates": [{"goal_id": "g-a", "gate_id": 1, "question": "q" * 4000}] * 20,
    }
    assert bulk(server, big)[0] == 413
    assert load_state(layout, "g-a").gates[0].answer is None
    readonly = make_server(layout, port=0, refresh_interval_s=0.2, ttl_s=0.0)
    with contextlib.ExitStack() as stack:
        ro = stack.enter_context(contextlib.contextmanager(lambda: running(readonly))())
        status, reply, _ = bulk(ro, doc, headers)
    assert (status, "--actions" in reply["hint"]) == (403, True)


# --- the last hour's turns per agent ----------------------------------------------------------


def test_the_timeline_has_each_agents_turns_of_the_last_hour(layout, tmp_path):
    """Fleet slots first; a turn that ended before the hour is left out; a running one is in."""
    from loopx.fleet import AgentHeartbeat, AgentPhase
    from loopx.storage.files import atomic_write_model
    from loopx.testing.dashboard_fixtures import seed_fleet_root

    now = utcnow()
    seed_fleet_root(layout, 20, now=now, workdir=tmp_path)
    register_goals(layout, [make_goal("old", now=now, workdir=tmp_path)])
    old = failed_line("old", 1, message="long ago", minutes_ago=120)
    straddles = failed_line("old", 2, message="x", minutes_ago=50).model_copy(
        update={"started_at": now - timedelta(minutes=70), "agent_id": "agent-9"}
    )
    append_history(layout, [old, straddles])
    beat = AgentHeartbeat(
        agent_id="agent-3", pid=1, pid_started_at=0.0, hostname="h", phase=AgentPhase.RUNNING,
        goal_id="goal-00003", turn_key="goal-00003-000004-5", turn_started_at=now,
        started_at=now, beat_at=now,
    )  # fmt: skip
    atomic_write_model(layout.agent_file("agent-3"), beat)
    with _served(layout) as server:
        status, doc, _ = call(server, "GET", "/api/timeline", AUTH)
    assert status == 200
    agents = [a["agent_id"] for a in doc["agents"]]
    assert agents == ["agent-1", "agent-2", "agent-3", "agent-4", "agent-9"]
    rows = {a["agent_id"]: a["turns"] for a in doc["agents"]}
    assert len(rows["agent-1"]) == 60  # 20 goals x 3 turns, all inside the hour
    assert {t["status"] for t in rows["agent-1"] if t["goal_id"] == "goal-00005"} == {"failed"}
    starts = [t["started_at"] for t in rows["agent-1"]]
    assert starts == sorted(starts)
    [running] = rows["agent-3"]
    assert (running["status"], running["goal_id"], running["ended_at"]) == (
        "running",
        "goal-00003",
        None,
    )
    assert [(t["goal_id"], t["seq"]) for t in rows["agent-9"]] == [("old", 2)]  # not seq 1
    assert (doc["turns"], doc["truncated"]) == (62, False)


def test_the_timeline_needs_the_token_and_a_known_host(server):
    """401 without the token, 421 for a foreign Host."""
    assert call(server, "GET", "/api/timeline")[0] == 401
    assert call(server, "GET", "/api/timeline", {**AUTH, "Host": "evil.example"})[0] == 421


def test_the_timeline_of_two_thousand_busy_goals_reads_a_bounded_part(layout, tmp_path):
    """2,000 goals that all turned in the last hour: at most 300 histories read, and fast."""
    from loopx.testing.dashboard_fixtures import seed_fleet_root
    from loopx.web.timeline import MAX_GOALS

    seed_fleet_root(layout, 2000, now=utcnow(), workdir=tmp_path)
    with _served(layout) as server:
        call(server, "GET", "/api/overview", AUTH)  # the first snapshot
        started = time.monotonic()
        status, doc, _ = call(server, "GET", "/api/timeline", AUTH)
        cold = time.monotonic() - started
        started = time.monotonic()
        call(server, "GET", "/api/timeline", AUTH)
        warm = time.monotonic() - started
    print(f"\ntimeline of 2,000 goals: {cold * 1000:.0f} ms cold, {warm * 1000:.1f} ms warm")
    assert status == 200
    assert (doc["goals_read"], doc["truncated"], doc["turns"]) == (MAX_GOALS, True, 3 * MAX_GOALS)
    assert cold < 5.0  # generous for a loaded 2-core machine; measured figures in the report


def test_the_turn_reader_rereads_a_goal_only_when_its_newest_turn_changed(layout, tmp_path):
    """Unchanged goals are served from what was read; a goal with a new turn is read again."""
    from loopx.web.timeline import TurnReader

    register_goals(layout, [make_goal(g, now=utcnow(), workdir=tmp_path) for g in ("a", "b")])
    for goal in ("a", "b"):
        append_history(layout, [failed_line(goal, 1, message="m", minutes_ago=10)])
    reader = TurnReader(layout)
    start = utcnow() - timedelta(hours=1)
    keys = [("a", "a-000001-1"), ("b", "b-000001-1")]
    first, _ = reader.read(keys, start)
    layout.history_file("a").write_bytes(b"")  # unchanged key: the kept lines are used
    append_history(layout, [failed_line("b", 2, message="m", minutes_ago=5)])
    again, _ = reader.read([("a", "a-000001-1"), ("b", "b-000002-2")], start)
    assert [(x.goal_id, x.seq) for x in first] == [("a", 1), ("b", 1)]
    assert [(x.goal_id, x.seq) for x in again] == [("a", 1), ("b", 2), ("b", 1)]
