"""A sandboxed goal's host and check: hostile command hosts try to get out, and cannot.

Each hostile host is a Python script in the goal's workdir that tries one
thing and writes what it saw as its result; the test reads the result and
the journal (what the proxy refused, carried and injected).
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import psutil
import pytest

from loopx.agents.turn import TurnConfig, run_one_turn
from loopx.api import Root
from loopx.errors import LoopxError, SandboxUnavailableError
from loopx.root import Layout
from loopx.sandbox import unavailable
from loopx.testing.gitwork import git, make_repo
from loopx.turn.journal import TurnJournal
from tests.turnkit import cli_env, make_root

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="bubblewrap is not installed (.ci/setup.d/debian.sh)"
)

FAST = TurnConfig(lease_ttl_s=5, lease_grace_s=1, kill_grace_s=0.3)
SECRET = "sk-test-0123456789abcdef"


def _goal(tmp_path: Path, script: str, *extra: str, **kw: object) -> tuple[Root, Path]:
    """A root and a sandboxed goal ``g`` whose host runs ``script`` (a Python body)."""
    root = Root.open(tmp_path / "root", create=True)
    wd = tmp_path / "wd"
    wd.mkdir()
    header = "import json, os, socket, sys\nseen = {}\n"
    footer = "\njson.dump({'kind': 'progress', 'summary': json.dumps(seen)}, open(os.environ['LOOPX_RESULT_FILE'], 'w'))\n"
    (wd / "host.py").write_text(header + textwrap.dedent(script) + footer)
    root.goals.add(
        "g",
        objective="try to get out",
        workdir=wd,
        host=[sys.executable, "host.py", *extra],
        sandbox="bwrap",
        **kw,  # type: ignore[arg-type]
    )
    return root, wd


def _turn(root: Root) -> tuple[dict[str, object], TurnJournal]:
    report = run_one_turn(root.layout, "g", agent_id="a", config=FAST)
    assert report is not None
    journal = _journal(root.layout)
    assert journal.outcome is not None
    assert journal.outcome.result_file_text, journal.outcome.stderr
    summary = json.loads(journal.outcome.result_file_text)["summary"]
    return json.loads(summary), journal


def _journal(layout: Layout) -> TurnJournal:
    path = next(layout.turns_dir("g").glob("*.json"))
    return TurnJournal.model_validate_json(path.read_text())


def test_the_host_sees_nothing_of_the_users_files_and_writes_only_its_workdir(
    tmp_path, monkeypatch
):
    """~/.ssh, another goal's workdir, another account's config, the root, outside writes: refused."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text("PRIVATE KEY")
    monkeypatch.setenv("HOME", str(home))
    other = tmp_path / "other-goal"
    other.mkdir()
    (other / "notes").write_text("theirs")
    config = tmp_path / "account-b" / "config"
    config.mkdir(parents=True)
    (config / "auth.json").write_text("{}")
    root, wd = _goal(
        tmp_path,
        f"""
        def probe(name, act):
            try:
                act()
                seen[name] = "done"
            except OSError as e:
                seen[name] = type(e).__name__
        probe("ssh", lambda: open(os.path.expanduser("~/.ssh/id_rsa")).read())
        probe("other", lambda: open({str(other / "notes")!r}).read())
        probe("account", lambda: open({str(config / "auth.json")!r}).read())
        probe("root", lambda: os.listdir({str(tmp_path / "root" / "goals")!r}))
        probe("outside", lambda: open({str(other / "planted")!r}, "w").write("x"))
        probe("system", lambda: open("/usr/escape.txt", "w").write("x"))
        probe("own", lambda: open("mine.txt", "w").write("mine"))
        probe("home", lambda: open(os.path.expanduser("~/.cache-note"), "w").write("x"))
        """,
    )
    seen, _ = _turn(root)
    assert seen == {
        "ssh": "FileNotFoundError",
        "other": "FileNotFoundError",
        "account": "FileNotFoundError",
        "root": "FileNotFoundError",
        "outside": "FileNotFoundError",
        "system": "OSError",  # EROFS: the system is read-only
        "own": "done",
        "home": "done",  # its own home, a scratch folder under the goal
    }
    assert (wd / "mine.txt").read_text() == "mine"
    assert not (other / "planted").exists()
    assert not (home / ".cache-note").exists()


class _Provider(BaseHTTPRequestHandler):
    """A provider endpoint: records each request's Authorization, answers with rate-limit headers."""

    seen: list[str]

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        type(self).seen.append(self.headers.get("Authorization", ""))
        body = b'{"ok": true}'
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("x-ratelimit-remaining-requests", "41")
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST  # noqa: N815

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def provider():
    handler = type("Handler", (_Provider,), {"seen": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server, handler.seen
    server.shutdown()
    server.server_close()


def test_the_key_stays_outside_and_the_proxy_adds_it(tmp_path, provider):
    """The host holds a placeholder; its provider gets the key; the rate-limit headers are kept."""
    server, seen_auth = provider
    env_file = tmp_path / "creds.env"
    env_file.write_text(f"MOCK_API_KEY={SECRET}\n")
    env_file.chmod(0o600)
    _account(tmp_path, env_file, server.server_address[1])
    root, _ = _goal(
        tmp_path,
        """
        import urllib.request
        key = os.environ["MOCK_API_KEY"]
        secret = "HALF_A" + "HALF_B"  # never whole in this file
        seen["key_inside"] = any(secret in v for v in os.environ.values())
        seen["proc"] = any(
            secret.encode() in open(f"/proc/{p}/environ", "rb").read()
            for p in os.listdir("/proc") if p.isdigit()
        )
        seen["env_file"] = os.path.exists("ENV_FILE")
        seen["placeholder"] = key.startswith("loopx-sandbox-placeholder-")
        req = urllib.request.Request(os.environ["LOOPX_PROVIDER_URL"] + "/v1/messages",
            data=b"{}", headers={"Authorization": "Bearer " + key})
        with urllib.request.urlopen(req, timeout=5) as r:
            seen["status"] = r.status
        s = socket.create_connection(("127.0.0.1", 3128))  # the provider's host, another port
        s.sendall(b"CONNECT 127.0.0.1:FREE_PORT HTTP/1.1\\r\\n\\r\\n")
        seen["other_port"] = s.recv(100).split(b" ")[1].decode()
        """.replace("HALF_A", SECRET[:8])
        .replace("HALF_B", SECRET[8:])
        .replace("ENV_FILE", str(env_file))
        .replace("FREE_PORT", str(socket_port())),
        account="acct",
    )
    seen, journal = _turn(root)
    assert seen == {
        "key_inside": False,
        "proc": False,
        "env_file": False,
        "placeholder": True,
        "status": 200,
        "other_port": "403",  # the provider is allowed on its own port alone
    }
    assert seen_auth == [f"Bearer {SECRET}"]
    assert journal.outcome is not None and journal.outcome.network is not None
    assert journal.outcome.network.keys_injected == 1
    headers = json.loads(
        (root.layout.root / "accounts" / "acct" / "provider-headers.json").read_text()
    )
    assert headers["headers"]["x-ratelimit-remaining-requests"]["value"] == "41"


def _account(tmp_path: Path, env_file: Path, port: int) -> None:
    root = Root.open(tmp_path / "root", create=True)
    root.accounts.add(
        "acct",
        host_kind="command",
        env_file=env_file,
        env={"LOOPX_PROVIDER_URL": f"http://127.0.0.1:{port}"},
    )


def test_only_allowed_domains_are_reached_and_refusals_are_recorded(tmp_path, provider):
    """An allowed domain answers through the proxy; another port and a direct connect do not."""
    server, _ = provider
    port = server.server_address[1]
    free = socket_port()
    root, _ = _goal(
        tmp_path,
        f"""
        import urllib.request, urllib.error
        try:
            with urllib.request.urlopen("http://localhost:{port}/allowed", timeout=5) as r:
                seen["allowed"] = r.status
        except urllib.error.HTTPError as e:
            seen["allowed"] = e.code
        s = socket.create_connection(("127.0.0.1", 3128))
        s.sendall(b"CONNECT 127.0.0.1:{free} HTTP/1.1\\r\\n\\r\\n")
        seen["connect"] = s.recv(100).split(b"\\r\\n")[0].decode()
        try:
            socket.create_connection(("127.0.0.1", {port}), timeout=2)
            seen["direct"] = "connected"
        except OSError as e:
            seen["direct"] = type(e).__name__
        """,
        allow_domains=["localhost"],
    )
    seen, journal = _turn(root)
    assert seen == {
        "allowed": 200,
        "connect": "HTTP/1.1 403 Forbidden",
        "direct": "ConnectionRefusedError",  # the sandbox's loopback is its own
    }
    network = journal.outcome.network if journal.outcome else None
    assert network is not None
    assert [(r.target, r.count) for r in network.refused] == [(f"127.0.0.1:{free}", 1)]
    assert network.bytes_down > 0
    assert network.lines()[0].startswith(f"sandbox: connection to 127.0.0.1:{free} refused")


def socket_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_fork_bomb_is_bounded_and_killed(tmp_path):
    """A host forking a thousand processes is killed at the goal's process limit, and says so."""
    root, _ = _goal(
        tmp_path,
        """
        import time
        for _ in range(1000):
            try:
                if os.fork() == 0:
                    time.sleep(30)
                    os._exit(0)
            except OSError:
                break
        time.sleep(30)
        """,
        max_processes=64,
    )
    report = run_one_turn(root.layout, "g", agent_id="a", config=FAST)
    assert report is not None
    journal = _journal(root.layout)
    assert journal.outcome is not None
    assert "more than 64 processes" in journal.outcome.stderr
    assert journal.outcome.exit_code == 137
    # Killed processes of the namespace may take a moment to go: poll, with a deadline.
    deadline = time.monotonic() + 5
    while [p for p in psutil.process_iter() if _of_turn(p, journal.turn_key)]:
        assert time.monotonic() < deadline, "processes of the sandbox outlived its turn"
        time.sleep(0.02)


def _of_turn(process: psutil.Process, turn_key: str) -> bool:
    try:
        return process.environ().get("LOOPX_TURN_KEY") == turn_key
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return False


def test_the_sandbox_dies_with_its_agent(tmp_path):
    """SIGKILL to the agent running a sandboxed host ends every process of the sandbox."""
    root, wd = _goal(
        tmp_path,
        """
        import time
        if os.fork() == 0:
            os.setsid()
            time.sleep(60)
        open("started", "w").close()
        time.sleep(60)
        """,
    )
    agent = subprocess.Popen(
        [sys.executable, "-m", "loopx", "--root", str(root.layout.root), "turn", "run-once", "g"],
        env=cli_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 15
        while not (wd / "started").exists():
            assert time.monotonic() < deadline, "the host never started"
            time.sleep(0.02)
        inside = [p for p in psutil.process_iter() if _of_goal(p, root)]
        assert len(inside) >= 2
        agent.send_signal(signal.SIGKILL)
        agent.wait()
        _, alive = psutil.wait_procs(inside, timeout=4)
        assert alive == []
    finally:
        agent.kill()
        agent.wait()


def _of_goal(process: psutil.Process, root: Root) -> bool:
    try:
        env = process.environ()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return False
    return env.get("LOOPX_GOAL_ID") == "g" and env.get("LOOPX_ROOT") == str(root.layout.root)


def test_the_done_check_runs_under_the_same_rules(tmp_path):
    """A check that passes only when it cannot see another goal's workdir passes: it is confined."""
    other = tmp_path / "other-goal"
    other.mkdir()
    root = Root.open(tmp_path / "root", create=True)
    wd = tmp_path / "wd"
    wd.mkdir()
    (wd / "host.py").write_text(
        "import json, os\n"
        "json.dump({'kind': 'completed', 'summary': 'done'}, open(os.environ['LOOPX_RESULT_FILE'], 'w'))\n"
    )
    check = f"import os, sys; sys.exit(1 if os.path.exists({str(other)!r}) else 0)"
    root.goals.add(
        "g",
        objective="finish",
        workdir=wd,
        host=[sys.executable, "host.py"],
        done_check=[sys.executable, "-c", check],
        sandbox="bwrap",
    )
    run_one_turn(root.layout, "g", agent_id="a", config=FAST)
    journal = _journal(root.layout)
    assert journal.check is not None and journal.check.passed, journal.check
    assert root.goals.show("g").goal.status == "done"


def test_goal_add_refuses_a_sandbox_bubblewrap_cannot_run(tmp_path, monkeypatch):
    """Without bwrap on PATH, --sandbox bwrap is refused naming the package; nothing is written."""
    root = make_root(tmp_path / "root")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SandboxUnavailableError) as refused:
        Root.open(root.root).goals.add(
            "g",
            objective="o",
            workdir=tmp_path,
            host=[sys.executable],
            sandbox="bwrap",
            check=False,
        )
    assert "bubblewrap" in refused.value.message and "apt-get install bubblewrap" in str(
        refused.value.hint
    )
    assert not root.goal_file("g").exists()


def test_user_namespaces_off_names_the_sysctl(tmp_path):
    """user.max_user_namespaces = 0 is refused with the sysctl that turns them on."""
    (tmp_path / "user").mkdir()
    (tmp_path / "user" / "max_user_namespaces").write_text("0\n")
    refused = unavailable(sysctl_dir=tmp_path)
    assert refused is not None
    assert refused.hint == "sysctl -w user.max_user_namespaces=15000"
    assert unavailable(sysctl_dir=tmp_path / "none") is None
    assert os.environ.get("PATH")


def test_a_batch_plan_and_an_import_carry_the_sandbox(tmp_path, monkeypatch):
    """A plan's `sandbox` object registers a sandboxed goal; without bwrap the import is refused."""
    root = Root.open(tmp_path / "root", create=True)
    (tmp_path / "work" / "p").mkdir(parents=True)
    plan = tmp_path / "plan.json"
    box = {"kind": "bwrap", "allow_domains": ["pypi.org"], "autonomy": "full"}
    goal = {"id": "p", "objective": "o", "host": "/bin/true", "sandbox": box}
    plan.write_text(json.dumps({"goals": [goal]}))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(LoopxError) as refused:
        root.goals.import_file(plan)
    assert "bubblewrap" in refused.value.message
    monkeypatch.undo()
    root.goals.import_file(plan)
    sandbox = root.goals.show("p").goal.sandbox
    assert sandbox is not None
    assert (sandbox.allow_domains, sandbox.autonomy) == (["pypi.org"], "full")


def test_a_goal_added_on_a_sandboxed_account_gets_its_sandbox(tmp_path):
    """An account's sandbox is the default of goals added on it; the goal may narrow it."""
    root = Root.open(tmp_path / "root", create=True)
    root.accounts.add("boxed", host_kind="command", sandbox="bwrap", allow_domains=["pypi.org"])
    add = {"objective": "o", "workdir": tmp_path, "host": ["/bin/true"], "account": "boxed"}
    root.goals.add("a", **add)  # type: ignore[arg-type]
    root.goals.add("b", max_processes=32, **add)  # type: ignore[arg-type]
    root.goals.add("c", sandbox="none", **add)  # type: ignore[arg-type]
    a, b, c = (root.goals.show(g).goal.sandbox for g in "abc")
    assert a is not None and a.allow_domains == ["pypi.org"]
    assert b is not None and (b.allow_domains, b.max_processes) == (["pypi.org"], 32)
    assert c is None


def test_a_sandboxed_worktree_goal_commits_on_its_branch(tmp_path):
    """In a worktree, git inside the sandbox reaches the repository's git directory: it commits."""
    repo = make_repo(tmp_path / "repo")
    root = Root.open(tmp_path / "root", create=True)
    script = (
        "cat > /dev/null; echo notes > notes.txt; git add notes.txt; "
        "git -c user.name=t -c user.email=t@x commit -q -m notes; "
        'printf \'{"kind": "progress", "summary": "ok"}\' > "$LOOPX_RESULT_FILE"'
    )
    root.goals.add(
        "g",
        objective="write notes",
        workdir=repo,
        host=["sh", "-c", script],
        worktree=True,
        sandbox="bwrap",
    )
    run_one_turn(root.layout, "g", agent_id="a", config=FAST)
    journal = _journal(root.layout)
    assert journal.outcome is not None and journal.outcome.exit_code == 0, journal.outcome
    assert git(repo, "show", "loopx/g:notes.txt") == "notes"


def test_a_file_past_the_size_limit_is_refused(tmp_path):
    """A host writing a file larger than --max-file-mb gets EFBIG; the file stops at the limit."""
    root, wd = _goal(
        tmp_path,
        """
        try:
            with open("big.bin", "wb") as f:
                f.write(b"x" * (2 * 1024 * 1024))
            seen["big"] = "written"
        except OSError as e:
            seen["big"] = e.errno
        """,
        max_file_mb=1,
    )
    seen, _ = _turn(root)
    assert seen == {"big": errno.EFBIG}
    assert (wd / "big.bin").stat().st_size == 1024 * 1024


def test_the_roots_default_sandbox_goes_to_goals_added_without_one(tmp_path):
    """`init --sandbox bwrap` sets the root's default: a new goal gets it unless it says none."""
    report = Root.init(tmp_path / "root", sandbox="bwrap", allow_domains=["github.com"])
    assert report.sandbox is not None and report.sandbox.allow_domains == ["github.com"]
    root = Root.open(tmp_path / "root")
    add = {"objective": "o", "workdir": tmp_path, "host": ["/bin/true"]}
    root.goals.add("a", **add)  # type: ignore[arg-type]
    root.goals.add("b", sandbox="none", **add)  # type: ignore[arg-type]
    a = root.goals.show("a").goal.sandbox
    assert a is not None and a.allow_domains == ["github.com"]
    assert root.goals.show("b").goal.sandbox is None
    assert Root.init(tmp_path / "root").sandbox == report.sandbox  # a plain init keeps it


def test_a_merge_runs_the_goal_s_check_on_the_merged_tree_in_its_sandbox(tmp_path):
    """A check that passes only when it cannot see another goal's workdir passes at the merge
    too: the merged tree's check is confined as the turn's was."""
    from loopx.agents.automerge import merge

    other = tmp_path / "other-goal"
    other.mkdir()
    repo = make_repo(tmp_path / "repo")
    root = Root.open(tmp_path / "root", create=True)
    script = (
        "cat > /dev/null; echo notes > notes.txt; git add notes.txt; "
        "git -c user.name=t -c user.email=t@x commit -q -m notes; "
        'printf \'{"kind": "completed", "summary": "ok"}\' > "$LOOPX_RESULT_FILE"'
    )
    check = f"import os, sys; sys.exit(1 if os.path.exists({str(other)!r}) else 0)"
    root.goals.add(
        "g",
        objective="write notes",
        workdir=repo,
        host=["sh", "-c", script],
        worktree=True,
        done_check=[sys.executable, "-c", check],
        sandbox="bwrap",
    )
    run_one_turn(root.layout, "g", agent_id="a", config=FAST)
    assert root.goals.show("g").goal.status == "done"
    journal = merge(root.layout, "g")
    assert (journal.outcome, journal.check is not None and journal.check.passed) == (
        "merged",
        True,
    ), journal
    assert git(repo, "show", "main:notes.txt") == "notes"
