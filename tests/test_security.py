"""Security: private files, a refused shared root, no symlink followed, no id traversal,
a loopback read-only status server, and secrets kept out of everything LoopX writes."""

from __future__ import annotations

import http.client
import json
import os
import re
import shlex
import signal
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from loopx.agents.turn import run_one_turn
from loopx.cli._app import main
from loopx.log import configure_logging
from loopx.root import Layout
from loopx.root.dropbox import drop_box_base
from loopx.turn.journal import journal_files
from tests.turnkit import cli_env, demo_goal, loopx, make_root

SECRET = "sk-test-9f8e7d6c5b4a"  # the value of a secret-named variable


def in_process(capsys, root: Path, *args: str) -> tuple[int, str, str]:  # type: ignore[no-untyped-def]
    """Run the real CLI entry point in this process (fast); (exit code, stdout, stderr)."""
    capsys.readouterr()
    # Log to this test's captured stderr, not to a stream an earlier test closed.
    configure_logging(force=True)
    try:
        code = main(["--root", str(root), *args])
    except SystemExit as e:  # argparse's own usage errors
        code = int(e.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def tree_modes(root: Path) -> list[tuple[str, str]]:
    """Every entry under ``root`` whose mode is not 0700 (dirs) or 0600 (files)."""
    bad = []
    for path in [root, *root.rglob("*")]:
        st = path.lstat()
        if (stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) != 0o700) or (
            stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) != 0o600
        ):
            bad.append((str(path), oct(stat.S_IMODE(st.st_mode))))
    return bad


def test_root_dirs_0700_and_files_0600_even_with_umask_0(tmp_path: Path) -> None:
    """A root made and used under umask 000 has only 0700 directories and 0600 files."""
    root = tmp_path / "root"
    wd = tmp_path / "wd"
    wd.mkdir()

    def run(*args: str) -> None:
        done = subprocess.run(
            [sys.executable, "-m", "loopx", "--root", str(root), *args],
            env=cli_env(),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            preexec_fn=lambda: os.umask(0),
        )
        assert done.returncode in {0, 3}, done.stderr

    run("init")
    run("goal", "add", "g", "--objective", "o", "--workdir", str(wd))
    run("turn", "run-once", "g")
    run("status")
    run("recover")
    assert tree_modes(root) == []


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o702])
@pytest.mark.parametrize(
    "command",
    [
        ("goal", "list"),
        ("status",),
        ("turn", "run-once", "g"),
        ("recover",),
        ("agent", "run", "--agent-id", "a", "--once"),
        ("supervisor", "run", "--until-idle"),
    ],
)
def test_root_writable_by_others_is_refused(
    tmp_path: Path,
    mode: int,
    command: tuple[str, ...],
    capsys,  # type: ignore[no-untyped-def]
) -> None:
    """Every command refuses a root that group or others can write, and says how to fix it."""
    layout = make_root(tmp_path / "root")
    demo_goal(layout, "g", tmp_path / "wd")
    layout.root.chmod(mode)
    code, _out, err = in_process(capsys, layout.root, *command)
    assert code != 0
    assert "writable by other users" in err and "chmod 700" in err
    assert not journal_files(layout, "g")


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give the runtime root away")
def test_root_owned_by_someone_else_is_refused(tmp_path: Path) -> None:
    """A root owned by another uid is refused."""
    layout = make_root(tmp_path / "root")
    os.chown(layout.root, 65534, 65534)
    done = loopx(layout.root, "goal", "list")
    assert done.returncode != 0 and "belongs to uid 65534" in done.stderr


# --- symlinks ----------------------------------------------------------------------------------


def _plant(layout: Layout, where: str, tmp_path: Path) -> tuple[Path, Path]:
    """Replace ``where`` (relative to the root) by a symlink to a decoy outside the root."""
    target = layout.root / where
    decoy = tmp_path / "decoy" / target.name
    decoy.parent.mkdir(parents=True, exist_ok=True)
    if target.is_dir():
        target.rename(decoy)
    elif target.exists():
        decoy.write_bytes(target.read_bytes())
        target.unlink()
    else:
        decoy.write_text("decoy\n")
    target.symlink_to(decoy)
    return target, decoy


def _snapshot(path: Path) -> dict[str, bytes]:
    if path.is_dir():
        return {str(p): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}
    return {str(path): path.read_bytes()}


SYMLINK_PLACES = [
    "registry.json",
    "goals/g/state.json",
    "goals/g/history.jsonl",
    "goals/g/quota.jsonl",
    "goals/g/epoch",
    "goals/g/lease.json",
    "goals/g/turns/JOURNAL",
    "goals/g/turns",
    "goals/g/runs",
    "goals/g/results",
    "goals/g",
    "goals",
    "agents",
    "projections",
    "quarantine",
    "logs",
]


@pytest.mark.parametrize("where", SYMLINK_PLACES)
def test_planted_symlink_is_never_followed(tmp_path: Path, where: str, capsys) -> None:  # type: ignore[no-untyped-def]
    """A symlink planted anywhere in the root is refused: its target is never read or written."""
    layout = make_root(tmp_path / "root")
    demo_goal(layout, "g", tmp_path / "wd", "--steps", "9")
    run_one_turn(layout, "g", agent_id="setup")
    loopx(layout.root, "status")
    (layout.goal_dir("g") / "results").mkdir(exist_ok=True)
    where = where.replace("JOURNAL", journal_files(layout, "g")[0].name)
    link, decoy = _plant(layout, where, tmp_path)
    before = _snapshot(decoy)
    errors = [
        in_process(capsys, layout.root, *command)[2]
        for command in (
            ("turn", "run-once", "g"),
            ("recover",),
            ("status", "--json"),
            ("replay", "g", "--verify"),
        )
    ]
    agent = loopx(layout.root, "agent", "run", "--agent-id", "a", "--once", timeout=60)
    errors.append(agent.stderr)
    for text in errors:
        assert "Traceback" not in text, text
    assert link.is_symlink(), "the planted link was replaced or removed"
    assert _snapshot(decoy) == before, "the symlink's target was written through"
    # With the drop box outside the root (loopx.root.dropbox) nothing uses results/.
    if where != "goals/g/results" or drop_box_base() is None:
        assert any("symlink" in text for text in errors), errors
    doctor = json.loads(loopx(layout.root, "doctor", "--json").stdout)
    assert any(f["code"] == "symlink" and f["path"] == str(link) for f in doctor["findings"])


# --- ids ---------------------------------------------------------------------------------------


BAD_IDS = ["../x", "..", ".", "a/b", "/etc/passwd", ".hidden", "-rf", "a b", "x" * 65, "é"]
ID_COMMANDS = [
    ("goal", "show", "{id}"),
    ("goal", "add", "{id}", "--objective", "o"),
    ("goal", "pause", "{id}"),
    ("goal", "done", "{id}"),
    ("goal", "reset-session", "{id}"),
    ("gate", "open", "{id}", "--question", "q"),
    ("quota", "show", "{id}"),
    ("quota", "should-run", "{id}"),
    ("turn", "run-once", "{id}"),
    ("journal", "list", "{id}"),
    ("journal", "inspect", "{id}", "k"),
    ("journal", "inspect", "g", "{id}"),
    ("replay", "{id}"),
    ("archive", "{id}"),
    ("probe", "{id}"),
    ("agent", "run", "--once", "--agent-id", "{id}"),
]


@pytest.mark.parametrize("command", ID_COMMANDS, ids=" ".join)
def test_traversal_ids_are_rejected_on_every_command(
    tmp_path: Path,
    command: tuple[str, ...],
    capsys,  # type: ignore[no-untyped-def]
) -> None:
    """Every command taking a goal id, turn key or agent id rejects traversal with exit 2."""
    layout = make_root(tmp_path / "root")
    demo_goal(layout, "g", tmp_path / "wd")
    outside = tmp_path / "outside"
    outside.mkdir()
    for bad in BAD_IDS:
        args = [a.replace("{id}", bad) for a in command]
        code, _out, err = in_process(capsys, layout.root, *args)
        assert code == 2, (bad, code, err)
        assert "Traceback" not in err
    assert list(outside.iterdir()) == []
    assert sorted(p.name for p in layout.goals_dir.iterdir()) == ["g"]


# --- the status server -------------------------------------------------------------------------


@pytest.fixture
def serve(
    tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[tuple[subprocess.Popen[str], str, int]]:
    layout = make_root(tmp_path / "root")
    demo_goal(layout, "g", tmp_path / "wd")
    token = getattr(request, "param", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "loopx", "--root", str(layout.root), "serve", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cli_env(**({"LOOPX_SERVE_TOKEN": token} if token else {})),
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        found = re.search(r"http://([^/\s]+)/(?:#token=(\S+))?", line)
        assert found, f"serve printed no address: {line!r}"
        hostport = found.group(1)
        host, port = hostport.rsplit(":", 1)
        request.node.served_token = found.group(2)  # the token serve made (or was given)
        yield proc, host, int(port)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()


def _http(host: str, port: int, method: str, path: str, token: str | None = None) -> int:
    conn = http.client.HTTPConnection(host, port, timeout=10)
    try:
        conn.request(method, path, headers={"Authorization": f"Bearer {token}"} if token else {})
        return conn.getresponse().status
    finally:
        conn.close()


def test_server_binds_loopback_by_default_and_is_read_only(serve, request) -> None:  # type: ignore[no-untyped-def]
    """`loopx serve` listens on 127.0.0.1 behind a token it made; writes are 405; traversal 404."""
    _proc, host, port = serve
    token = request.node.served_token
    assert host == "127.0.0.1"
    assert token
    assert _http(host, port, "GET", "/status") == 401
    assert _http(host, port, "GET", "/healthz") == 200  # a probe's answer: {"ok": true} only
    assert _http(host, port, "GET", "/healthz", token=token) == 200
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        assert _http(host, port, method, "/status", token=token) == 405
    for path in ("/goals/..%2F..%2Fetc%2Fpasswd", "/goals/../registry.json", "/goals/%2e%2e/turns"):
        assert _http(host, port, "GET", path, token=token) in {400, 404}


@pytest.mark.parametrize("serve", ["t0ken-for-the-test"], indirect=True)
def test_server_with_a_token_refuses_requests_without_it(serve) -> None:  # type: ignore[no-untyped-def]
    """With LOOPX_SERVE_TOKEN set, a request without (or with a wrong) bearer token is a 401."""
    _proc, host, port = serve
    assert _http(host, port, "GET", "/status") == 401
    assert _http(host, port, "GET", "/status", token="wrong") == 401
    assert _http(host, port, "GET", "/status", token="t0ken-for-the-test") == 200


def test_server_refuses_open_bind_without_token(tmp_path: Path) -> None:
    """A non-loopback bind without a token (--no-token) exits 2 before binding anything."""
    layout = make_root(tmp_path / "root")
    done = loopx(layout.root, "serve", "--host", "0.0.0.0", "--port", "0", "--no-token", timeout=20)
    assert done.returncode == 2 and "token" in done.stderr


# --- secrets -----------------------------------------------------------------------------------


LEAKY_HOST = (
    'echo "stdout says $MY_API_TOKEN"; echo "stderr says $DB_PASSWORD" >&2; '
    'printf \'{"schema_version": 1, "kind": "completed", "summary": "used %s", '
    '"evidence": ["%s"], "state_patch": {"beliefs": ["key %s"]}}\' '
    '"$MY_API_TOKEN" "$DB_PASSWORD" "$MY_API_TOKEN" > "$LOOPX_RESULT_FILE"; env'
)


def test_secrets_never_reach_journals_run_logs_or_logs(tmp_path: Path) -> None:
    """A host printing secret-named variables everywhere leaves no secret value on disk or in logs."""
    root = tmp_path / "root"
    wd = tmp_path / "wd"
    wd.mkdir()
    env = {"MY_API_TOKEN": SECRET, "DB_PASSWORD": SECRET[::-1]}
    for args in (
        ("init",),
        (
            "goal",
            "add",
            "g",
            "--objective",
            "o",
            "--workdir",
            str(wd),
            "--host",
            shlex.join(["sh", "-c", LEAKY_HOST]),
        ),
    ):
        assert loopx(root, *args).returncode == 0
    logs = []
    for args in (
        ("--log-level", "debug", "supervisor", "run", "--agents", "1", "--until-idle"),
        ("--log-level", "debug", "status", "--json"),
        ("replay", "g", "--json"),
    ):
        done = loopx(root, *args, **env)
        logs += [done.stdout, done.stderr]
    journal = json.loads(journal_files(make_root(root), "g")[0].read_text())
    assert "[REDACTED]" in journal["outcome"]["stdout"], journal["outcome"]
    assert "[REDACTED]" in journal["result"]["summary"]
    for value in (SECRET, SECRET[::-1]):
        for text in logs:
            assert value not in text
        for path in root.rglob("*"):
            if path.is_file():
                assert value.encode() not in path.read_bytes(), path
