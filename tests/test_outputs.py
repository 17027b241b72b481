"""Every `--json` output of every command, and every HTTP reply, validates against its model.

The real CLI runs on a tmp root with the demo host; each document is parsed
with the model `loopx schema` names for it (extra keys are refused), so an
output that drifts from its model fails here.
"""

from __future__ import annotations

import argparse
import http.client
import json
import shlex
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from loopx.api._schemas import FILES, OUTPUTS, SCHEMAS
from loopx.cli._app import build_parser
from loopx.model import Record
from loopx.root import ResolvedRoot, RootSource, open_root
from loopx.testing.gitwork import host_argv, make_repo
from loopx.web.server import make_server
from tests.conftest import Cli
from tests.turnkit import loopx_here

pytestmark = pytest.mark.timeout(300)

# Every command that takes --json, and the schema name of what it prints.
JSON_OUTPUT_OF: dict[tuple[str, ...], str] = {
    ("init",): "init",
    ("logs",): "log-entry",  # one per line
    ("goal", "add"): "goal",
    ("goal", "import"): "goal-import",
    ("goal", "list"): "goal-list",
    ("goal", "show"): "goal-view",
    ("goal", "pause"): "goal",
    ("goal", "resume"): "goal",
    ("goal", "done"): "goal",
    ("goal", "reopen"): "goal",
    ("goal", "reset-session"): "session-reset",
    ("goal", "worktree"): "goal-worktree",
    ("goal", "merge"): "merge-journal",
    ("gate", "open"): "gate",
    ("gate", "resolve"): "gate",
    ("quota", "show"): "quota-report",
    ("account", "add"): "account-document",
    ("account", "edit"): "account-document",
    ("account", "remove"): "account-document",
    ("account", "list"): "account-list",
    ("account", "show"): "account-show",
    ("account", "resolve"): "account-summary",
    ("account", "budget"): "root-budget",
    ("account", "check"): "account-check",
    ("quota", "should-run"): "quota-decision",
    ("turn", "run-once"): "turn-attempt",
    ("journal", "list"): "journal-list",
    ("journal", "inspect"): "journal-inspection",
    ("recover",): "recovery",
    ("status",): "status",
    ("refresh",): "refresh",
    ("archive",): "archive",
    ("probe",): "probe",
    ("doctor",): "doctor",
    ("replay",): "replay",
    ("retention", "set"): "retention",
    ("retention", "show"): "retention",
    ("gc",): "gc",
    ("batch", "run"): "batch-report",
    ("demo",): "batch-report",
    ("supervisor", "start"): "supervisor-started",
    ("supervisor", "stop"): "supervisor-stopped",
    ("supervisor", "status"): "supervisor-status",
    ("supervisor", "run"): "supervisor-run",
    ("supervisor", "scale"): "supervisor-scale",
    ("notify", "add"): "notify-list",
    ("notify", "list"): "notify-list",
    ("hosts",): "host-list",
    ("hosts", "check"): "host-check",
    ("notify", "remove"): "notify-list",
    ("notify", "set"): "notify-list",
    ("notify", "test"): "notify-test",
}

HTTP_OUTPUT_OF: dict[str, str] = {
    "/status": "http-status",
    "/goals": "http-goals",
    "/goals/g1": "http-goal",
    "/goals/g1/turns": "http-turns",
    "/healthz": "http-healthz",
    "/nowhere": "http-error",
    "/api/overview": "dashboard-overview",
    "/api/goals": "dashboard-goals",
    "/api/goals/g1": "dashboard-goal",
    "/api/goals/g1/runs/1": "dashboard-run-log",
    "/api/goals/g1/runs/latest": "dashboard-run-log",
    "/api/audit": "dashboard-audit",
    "/api/timeline": "dashboard-timeline",
    "/api/goals/w1/worktree": "dashboard-worktree",
}

# Outputs no GET of a plain JSON route returns: the SSE stream's events and the token-only
# POST actions (the dashboard's own tests drive those).
NOT_A_GET_REPLY = {
    "change-event",
    "dashboard-action",
    "dashboard-gate-conflict",
    "dashboard-bulk-answer",
    "dashboard-bulk-action",
}


def _json_commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> set[tuple[str, ...]]:
    """Every (sub)command path whose parser has a --json option."""
    found: set[tuple[str, ...]] = set()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                if name == "daemon":  # an alias of `supervisor`
                    continue
                found |= _json_commands(sub, (*path, name))
        elif "--json" in action.option_strings:
            found.add(path)
    return found


def test_every_json_command_has_a_model() -> None:
    """The table above names every command that takes --json, each with a listed schema."""
    assert _json_commands(build_parser()) == set(JSON_OUTPUT_OF)
    assert set(JSON_OUTPUT_OF.values()) <= set(SCHEMAS)


def test_schema_lists_every_output_and_file_model() -> None:
    """`loopx schema` names every model with a schema_version, outputs and files alike."""
    # Load the modules outside the kernel that define records, so their subclasses exist.
    import loopx.agents.turn
    import loopx.supervisor.control
    import loopx.supervisor.supervisor  # noqa: F401 - imported for its side effect

    def subclasses(cls: type[BaseModel]) -> Iterator[type[BaseModel]]:
        for sub in cls.__subclasses__():
            yield sub
            yield from subclasses(sub)

    versioned = {c for c in subclasses(Record) if "schema_version" in c.model_fields}
    assert versioned - set(SCHEMAS.values()) == set()
    printed = {SCHEMAS[n] for n in {*JSON_OUTPUT_OF.values(), *HTTP_OUTPUT_OF.values()}}
    nested = {d for m in printed for d in m.model_json_schema().get("$defs", {})}
    unused = {n for n, m in OUTPUTS.items() if m not in printed and m.__name__ not in nested}
    unused -= NOT_A_GET_REPLY
    assert unused == set()  # every output model is printed by a command or a route, or inside one
    assert not set(FILES) & set(OUTPUTS)


def test_the_kernel_and_the_web_list_no_document_under_one_name() -> None:
    """The API joins the kernel's list and the web's: a name in both would hide a model."""
    from loopx import schemas
    from loopx.web import schemalist

    kernel = {*schemas.FILES, *schemas.OUTPUTS}
    web = {*schemalist.FILES, *schemalist.OUTPUTS}
    assert kernel & web == set()
    assert set(SCHEMAS) == kernel | web


def test_schema_command_prints_each_listed_schema(cli: Cli) -> None:
    """`loopx schema NAME` prints a JSON Schema for an output as for a file kind."""
    for name in ("goal-view", "supervisor-status", "http-turns", "goal-file", "registry"):
        done = loopx_here(cli.root, "schema", name)
        assert done.returncode == 0, done.stderr
        schema = json.loads(done.stdout)
        assert schema["properties"]["schema_version"]["const"] == (2 if name == "registry" else 1)


def _validated(name: str, stdout: str) -> BaseModel:
    return SCHEMAS[name].model_validate_json(stdout)


def _check_notify(check: Callable[..., BaseModel]) -> None:
    check(("notify", "add"), "json://127.0.0.1:9/hook", "--events", "gate")  # port 9: refused
    check(("notify", "list"))
    check(("notify", "set"), "--link-base", "http://127.0.0.1:9/")
    check(("notify", "test"), codes=(1,))
    check(("notify", "remove"), "json://127.0.0.1:9/hook")


def _check_accounts(check: Any, root: Path) -> None:
    """Every `loopx account` command's --json, with an account gate as an auth failure leaves it."""
    from loopx.accounts.accountstore import update_state
    from loopx.accounts.records import AccountGate
    from loopx.model import utcnow
    from loopx.root import Layout

    check(("account", "add"), "acct", "--host-kind", "demo", "--max-tokens", "1000")
    check(("account", "edit"), "acct", "--on-limit", "gate")
    check(("account", "list"))
    check(("account", "show"), "acct")
    check(("account", "budget"), "--max-tokens", "1000000")
    gate = AccountGate(question="log in", opened_at=utcnow(), opened_by="t#1")
    update_state(Layout.at(root), "acct", lambda s: s.model_copy(update={"gate": gate}))
    check(("account", "resolve"), "acct", "--answer", "ok")
    check(("account", "remove"), "acct")
    check(("account", "add"), "cx", "--host-kind", "codex")
    check(("account", "check"), "cx", codes=(0, 1, 4))  # no codex on PATH: `missing`, exit 1


def _worktree_commands(tmp_path: Path) -> list[tuple[Any, ...]]:
    """A worktree goal that commits, completes and merges."""
    repo = make_repo(tmp_path / "repo")
    host = shlex.join(host_argv("notes.txt"))
    return [
        (
            ("goal", "add"),
            "gw",
            "--objective",
            "x",
            "--workdir",
            str(repo),
            "--worktree",
            "--host",
            host,
        ),
        (("turn", "run-once"), "gw"),
        (("goal", "worktree"), "gw"),
        (("goal", "merge"), "gw"),
    ]


def test_every_json_output_validates(cli: Cli, tmp_path: Path) -> None:  # noqa: PLR0915 - one command a line
    """Run every --json command on a demo root; each output parses with its model."""
    seen: set[tuple[str, ...]] = set()

    def check(command: tuple[str, ...], *args: str, codes: tuple[int, ...] = (0,)) -> BaseModel:
        # Commands that start processes run as real ones; the rest in this process.
        if command[0] in ("batch", "demo", "turn") or command[-1] in ("start", "run"):
            proc = cli.run(*command, *args, "--json", timeout=180)
        else:
            proc = loopx_here(cli.root, *command, *args, "--json")
        assert proc.returncode in codes, (command, proc.returncode, proc.stderr)
        seen.add(command)
        return _validated(JSON_OUTPUT_OF[command], proc.stdout)

    work = tmp_path / "work"
    work.mkdir()
    check(("init",))
    assert check(("init",), "--upgrade").migration is not None  # type: ignore[attr-defined]
    check(("goal", "add"), "g1", "--objective", "count", "--workdir", str(work),
          "--host-kind", "demo", "--next-probe", "echo seen")  # fmt: skip
    check(("goal", "add"), "g2", "--objective", "x", "--workdir", str(work), "--host-kind", "demo")
    listing = tmp_path / "goals.jsonl"
    listing.write_text(json.dumps({"id": "g3", "objective": "y", "workdir": str(work)}) + "\n")
    check(("goal", "import"), str(listing))
    check(("goal", "list"))
    check(("goal", "show"), "g1")
    check(("quota", "show"), "g1")
    check(("quota", "should-run"), "g1", codes=(0, 3))
    _check_accounts(check, cli.root)
    attempt = check(("turn", "run-once"), "g1")
    turn_key = attempt.report.turn_key  # type: ignore[attr-defined]
    check(("journal", "list"), "g1")
    check(("journal", "inspect"), "g1", turn_key)
    check(("recover",))
    check(("replay",), "g1", "--verify")
    check(("retention", "set"), "--keep-turns", "1", "--keep-days", "0")
    check(("retention", "show"))
    check(("gc",), "--dry-run")
    check(("gate", "open"), "g1", "--question", "ok?")
    check(("gate", "resolve"), "g1", "--answer", "yes")
    check(("goal", "reset-session"), "g1")
    check(("probe",), "g1")
    check(("refresh",))
    check(("status",))
    check(("goal", "pause"), "g2")
    check(("goal", "resume"), "g2")
    check(("goal", "done"), "g2")
    check(("goal", "reopen"), "g2", "--yes")
    check(("goal", "done"), "g2")
    check(("archive",), "g2")
    for command, *args in _worktree_commands(tmp_path):
        check(command, *args)
    _check_notify(check)
    check(("hosts",))
    check(("hosts", "check"), "claude", codes=(0, 1))  # no claude on PATH here: missing
    check(("doctor",), codes=(0, 1))
    check(("supervisor", "start"), "--agents", "1")
    check(("supervisor", "status"))
    check(("supervisor", "scale"), "0")
    check(("supervisor", "stop"))
    check(("supervisor", "run"), "--agents", "1", "--until-idle", codes=(0, 1, 4))
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"goals": [{"id": "b1", "objective": "x", "host_kind": "demo"}]}))
    check(("batch", "run"), str(plan), "--agents", "1")
    seen.add(_check_logs(cli.root))
    check(("demo",), "--agents", "2", "--root", str(tmp_path / "demo-root"))
    assert seen == set(JSON_OUTPUT_OF)


def _check_logs(root: Path) -> tuple[str, ...]:
    """`logs --json` prints one entry per line: each validates, and the goal's turns are there."""
    logs = loopx_here(root, "logs", "g1", "--json")
    assert logs.returncode == 0, logs.stderr
    entries = [_validated("log-entry", line) for line in logs.stdout.splitlines()]
    assert any(e.event == "turn" for e in entries)  # type: ignore[attr-defined]
    return ("logs",)


def _get(port: int, path: str) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def test_every_http_reply_validates(cli: Cli, tmp_path: Path) -> None:
    """Each JSON route of `loopx serve` replies a document its model accepts."""
    cli.run("goal", "add", "g1", "--objective", "x", "--workdir", str(tmp_path), check=True)
    cli.run("turn", "run-once", "g1", check=True)
    repo = make_repo(tmp_path / "w1-repo")
    cli.run(
        "goal", "add", "w1", "--objective", "x", "--workdir", str(repo), "--worktree", check=True
    )
    layout = open_root(
        ResolvedRoot(cli.root, cli.root / "registry.json", RootSource.FLAG), create=False
    )
    server = make_server(layout, host="127.0.0.1", port=0, refresh_interval_s=0.5)
    thread = threading.Thread(target=server.serve_forever)
    thread.start()
    try:
        port = server.server_address[1]
        for path, name in HTTP_OUTPUT_OF.items():
            status, body = _get(port, path)
            assert (status == 200) == (name != "http-error"), (path, status, body)
            _validated(name, body.decode())
        turns = SCHEMAS["http-turns"].model_validate_json(_get(port, "/goals/g1/turns")[1])
        assert len(turns.turns) == 1  # type: ignore[attr-defined]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
