"""One damaged account file costs that account, never the root.

Garbage, a truncated JSON document or a schema version from elsewhere in an
account's policy, state or spend file (or the root's budget): `status`,
`account list`, `serve` and every other account keep working; the damaged
account is shown ``damaged`` naming the file, its goals wait on it (they do
not fail), and `loopx doctor` reports it with a repair that frees them.
"""

from __future__ import annotations

import http.client
import json
import pickle
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from loopx.accounts.accountfiles import damaged_state
from loopx.accounts.records import AccountState, Condition
from loopx.accounts.rules import admit
from loopx.errors import AccountDamagedError
from loopx.root import Layout
from loopx.web.server import HttpServer, make_server
from tests.conftest import Cli

pytestmark = pytest.mark.timeout(180)

DAMAGE = {
    "garbage": lambda text: "\x00garbage\x7f{",
    "truncated": lambda text: text[: len(text) // 2],
    "schema_version": lambda text: json.dumps(json.loads(text) | {"schema_version": 99}),
}


def _setup(cli: Cli, tmp_path: Path, *, budget: bool = False) -> Cli:
    """Accounts ``plan`` (goal p) and ``other`` (goal o), both of the demo host; one turn each.

    Returns the CLI called in this process: what the commands print and decide
    is the point, and each test starts one real process too.
    """
    cli = cli.in_process()
    flags = ["--max-tokens", "1000000"] if budget else []
    for name in ("plan", "other"):
        cli.run("account", "add", name, "--host-kind", "demo", *flags, check=True)
    for goal_id, name in (("p", "plan"), ("o", "other")):
        work = tmp_path / f"w-{goal_id}"
        work.mkdir()
        cli.run(
            "goal", "add", goal_id, "--objective", "x", "--workdir", str(work),
            "--host-kind", "demo", "--account", name, check=True,
        )  # fmt: skip
        done = json.loads(cli.run("turn", "run-once", goal_id, "--json", check=True).stdout)
        assert done["report"]["status"] == "committed"
    if budget:
        cli.run("account", "budget", "--max-tokens", "1000000", check=True)
    return cli


def _damage(path: Path, mode: str) -> None:
    text = path.read_text() if path.exists() else '{"schema_version": 1}'
    path.write_text(DAMAGE[mode](text))


def _json(cli: Cli, *args: str) -> Any:
    done = cli.run(*args, "--json")
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    return json.loads(done.stdout)


def _by_name(accounts: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {a["name"]: a for a in accounts}


@pytest.mark.parametrize(
    ("part", "mode"),
    [
        ("account.json", "garbage"),
        ("account.json", "truncated"),
        ("account.json", "schema_version"),
        ("state.json", "garbage"),
        ("state.json", "schema_version"),
        ("spend.json", "truncated"),
    ],
)
def test_a_damaged_account_file_holds_its_account_alone(
    cli: Cli, tmp_path: Path, part: str, mode: str
) -> None:
    """status and account list work, show the account damaged; doctor names the file."""
    here = _setup(cli, tmp_path, budget=part == "spend.json")
    path = cli.root / "accounts" / "plan" / part
    _damage(path, mode)
    damaged = path.read_bytes()

    status = _json(cli, "status", "--ttl", "0")  # a real process
    accounts = _by_name(status["accounts"])
    plan, other = accounts["plan"], accounts["other"]
    assert (plan["state"], plan["damaged_file"], plan["waiting"]) == ("damaged", str(path), ["p"])
    assert plan["message"].startswith(f"account plan waits for a repair: {path} is damaged: ")
    assert (other["state"], other["damaged_file"], other["waiting"]) == ("ok", None, [])
    views = {v["goal_id"]: v for v in status["goals"]}
    assert (views["p"]["actor"], views["p"]["reason"]) == ("human", "waiting")
    assert views["p"]["explanation"] == plan["message"]
    assert views["o"]["reason"] == "ready"

    listed = _by_name(_json(here, "account", "list")["accounts"])
    assert (listed["plan"]["state"], listed["plan"]["damaged_file"]) == ("damaged", str(path))
    assert listed["other"]["state"] == "ok"
    text = here.run("status")
    assert text.returncode == 0
    (line,) = [n for n in text.stdout.splitlines() if n.startswith("account plan")]
    assert ": damaged, 1 goal(s) waiting: account plan waits for a repair: " in line

    doctor = here.run("doctor", "--json")
    assert doctor.returncode == 1
    findings = json.loads(doctor.stdout)["findings"]
    (finding,) = [f for f in findings if f["code"] == "account_damaged"]
    assert (finding["path"], finding["severity"]) == (str(path), "error")
    assert "account plan holds 1 goal(s) (p) back" in finding["problem"]
    assert finding["repair"].startswith(f"rm {path}")

    # The other account's goal still runs; the damaged one is left as it was.
    ran = json.loads(here.run("turn", "run-once", "o", "--json").stdout)
    assert ran["report"]["status"] == "committed"
    assert path.read_bytes() == damaged


def test_a_damaged_root_budget_holds_every_goal_and_breaks_no_command(
    cli: Cli, tmp_path: Path
) -> None:
    """The root's budget file damaged: every goal waits on it, status and doctor say why."""
    here = _setup(cli, tmp_path)
    here.run("account", "budget", "--max-tokens", "1000000", check=True)
    path = cli.root / "accounts" / ".root" / "budget.json"
    _damage(path, "truncated")
    status = _json(cli, "status", "--ttl", "0")
    root = _by_name(status["accounts"])[".root"]
    assert (root["state"], root["damaged_file"]) == ("damaged", str(path))
    assert root["message"].startswith("the root's budget waits for a repair: ")
    assert {v["goal_id"]: v["reason"] for v in status["goals"]} == {"p": "waiting", "o": "waiting"}
    assert _by_name(_json(here, "account", "list")["accounts"])["other"]["state"] == "ok"
    findings = json.loads(here.run("doctor", "--json").stdout)["findings"]
    assert [f["path"] for f in findings if f["code"] == "account_damaged"] == [str(path)]
    held = json.loads(here.run("turn", "run-once", "o", "--json").stdout)
    assert (held["report"], held["quota"]["reason"]) == (None, "account_waiting")


def test_following_doctors_repair_frees_the_accounts_goals(cli: Cli, tmp_path: Path) -> None:
    """A damaged state file: its goal waits (no turn, no failure); doctor's rm lets it run again."""
    here = _setup(cli, tmp_path)
    path = cli.root / "accounts" / "plan" / "state.json"
    _damage(path, "garbage")
    held = json.loads(cli.run("turn", "run-once", "p", "--json").stdout)  # a real process
    assert (held["report"], held["quota"]["reason"]) == (None, "account_waiting")
    assert "waits for a repair" in held["quota"]["message"]
    state = json.loads((cli.root / "goals" / "p" / "state.json").read_text())
    assert state["consecutive_failures"] == 0
    (finding,) = [
        f
        for f in json.loads(here.run("doctor", "--json").stdout)["findings"]
        if f["code"] == "account_damaged"
    ]
    assert finding["repair"].split("  (")[0] == f"rm {path}"
    path.unlink()
    assert here.run("doctor").returncode == 0
    ran = json.loads(here.run("turn", "run-once", "p", "--json").stdout)
    assert ran["report"]["status"] == "committed"


def test_agents_never_claim_a_damaged_accounts_goal_and_the_batch_ends(
    cli: Cli, tmp_path: Path
) -> None:
    """--until-idle: the other account's goal runs to done; the held one is never claimed."""
    here = _setup(cli, tmp_path)
    _damage(cli.root / "accounts" / "plan" / "account.json", "garbage")
    epoch = (cli.root / "goals" / "p" / "epoch").read_text()
    done = cli.run("supervisor", "run", "--agents", "1", "--until-idle", timeout=120)
    assert done.returncode == 4, done.stderr[-2000:]  # some goal needs a human
    assert (cli.root / "goals" / "p" / "epoch").read_text() == epoch
    goals = {v["goal_id"]: v for v in _json(here, "status", "--ttl", "0")["goals"]}
    assert (goals["o"]["reason"], goals["p"]["reason"]) == ("done", "waiting")


@pytest.fixture
def serving(cli: Cli, tmp_path: Path, layout: Layout) -> Iterator[HttpServer]:
    """`loopx serve`'s server on port 0 over a root whose account ``plan`` is damaged."""
    _setup(cli, tmp_path)
    _damage(cli.root / "accounts" / "plan" / "account.json", "truncated")
    server = make_server(layout, host="127.0.0.1", port=0, refresh_interval_s=0.5)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def _get(server: HttpServer, path: str) -> tuple[int, bytes]:
    host, port = server.server_address[:2]
    conn = http.client.HTTPConnection(str(host), int(port), timeout=10)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def test_serve_starts_and_shows_the_damaged_account(serving: HttpServer) -> None:
    """/status, the dashboard's overview and /metrics answer; the account reads damaged."""
    code, body = _get(serving, "/status")
    assert code == 200
    accounts = _by_name(json.loads(body)["accounts"])
    assert (accounts["plan"]["state"], accounts["other"]["state"]) == ("damaged", "ok")
    code, body = _get(serving, "/api/overview")
    assert code == 200
    rows = _by_name(json.loads(body)["accounts"])
    assert rows["plan"]["state"] == "damaged" and "is damaged" in rows["plan"]["message"]
    code, body = _get(serving, "/metrics")
    assert code == 200
    assert b'loopx_account_state{account="plan",state="damaged"} 1.0' in body
    assert _get(serving, "/healthz")[0] == 200


def test_a_damaged_state_refuses_every_goal_with_its_reason() -> None:
    """The rule: no goal is admitted, not even as a probe, and the refusal names the file."""
    error = AccountDamagedError("plan", Path("/r/accounts/plan/state.json"), "not valid JSON")
    state = damaged_state(error)
    assert (state.condition, state.reason) == (
        Condition.DAMAGED,
        "/r/accounts/plan/state.json is damaged: not valid JSON",
    )
    refusal = admit(state, "g", now=datetime(2026, 1, 1, tzinfo=UTC))
    assert (refusal.allowed, refusal.take_probe, refusal.until) == (False, False, None)
    assert refusal.message == (
        "account plan waits for a repair: /r/accounts/plan/state.json is damaged: "
        "not valid JSON (see `loopx doctor`)"
    )
    assert admit(AccountState(name="plan"), "g", now=datetime(2026, 1, 1, tzinfo=UTC)).allowed


def test_the_error_names_the_account_file_and_survives_a_pickle() -> None:
    """What, where and what to do; agents hand errors across processes."""
    error = AccountDamagedError("plan", Path("/r/accounts/plan/account.json"), "not valid JSON")
    again = pickle.loads(pickle.dumps(error))
    assert (again.name, again.path, again.problem) == (error.name, error.path, error.problem)
    assert again.message == "account plan: /r/accounts/plan/account.json is damaged: not valid JSON"
    assert again.hint is not None and "loopx doctor" in again.hint
