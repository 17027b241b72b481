"""Record what the pinned real CLIs print for each mock mode into tests/realhosts/captures/.

Run ``python -m tests.realhosts.capture`` after bumping a pin in
.ci/setup.d/realhosts.sh; the fakes in loopx.testing must then print the same
messages (tests/test_fake_captures.py checks them).

``python -m tests.realhosts.capture --sessions [--bin DIR] [CLI ...]`` records one
session of three runs (a turn, the same session resumed, resumed into a usage
limit) of the CLIs in ``DIR`` (default: the pinned ones) into
``captures/sessions/<cli>-<version>.json``; tests/test_host_session_usage.py reads
each run's usage from them.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from loopx.agents.hosts.aider import BASE_FLAGS, RUN_ENV
from tests.realhosts.conftest import (
    AIDER_FLAGS,
    BIN,
    PINNED,
    PYTHON_CLIS,
    REPO,
    aider_home,
    gemini_home,
    opencode_home,
    pi_home,
    qwen_home,
)
from tests.realhosts.mockmodel import MockServer

CAPTURES = Path(__file__).parent / "captures"
CODEX_MODES = ["ok", "usage_limit", "429", "500", "unreachable", "lost_session", "resume_cd"]
CLAUDE_MODES = ["ok", "usage_limit", "weekly_limit", "429", "500", "unreachable", "lost_session"]
GEMINI_MODES = ["ok", "usage_limit", "429", "401", "500", "unreachable", "lost_session"]
CHAT_MODES = ["ok", "tool", "usage_limit", "429", "401", "500", "unreachable", "lost_session"]
# OpenCode retries a 429, a 5xx or a refused connection without end: the capture stops it,
# as LoopX's stall watch would, once it has logged its errors.
OPENCODE_RETRY_S = 45
# aider retries those for about 100 s: the capture stops it sooner, as the stall watch would.
AIDER_RETRY_S = 15
# aider's edits in ``tool`` mode: it writes the file and commits it itself.
AIDER_EDITS = {"hello.txt": "hi\n"}


def _env(home: Path, extra: dict[str, str]) -> dict[str, str]:
    return {"PATH": f"{BIN}:/usr/bin:/bin", "HOME": str(home), "TZ": "Europe/Berlin", **extra}


def _run(argv: list[str], env: dict[str, str], cwd: Path, timeout: float) -> dict[str, object]:
    try:
        p = subprocess.run(
            argv, input=b"say hi", capture_output=True, env=env, cwd=cwd, timeout=timeout,
            check=False,
        )  # fmt: skip
        code, out, err = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        code, out, err = None, e.stdout or b"", e.stderr or b""
    return {"exit_code": code, "stdout": out.decode(), "stderr": err.decode()}


BOGUS_UUID = "4f0a5c8e-0000-4000-8000-000000000000"


def _codex(tmp: Path, url: str, mode: str, work: Path) -> tuple[list[str], dict[str, str]]:
    home = tmp / "codex-home"
    home.mkdir()
    (home / "config.toml").write_text(
        'model = "mock-model"\nmodel_provider = "mock"\n'
        '[model_providers.mock]\nname = "mock"\n'
        f'base_url = "{url}/v1"\nwire_api = "responses"\nenv_key = "MOCK_API_KEY"\n'
        "request_max_retries = 0\nstream_max_retries = 0\n"
    )
    env = _env(tmp, {"CODEX_HOME": str(home), "MOCK_API_KEY": "sk-mock"})
    argv = [str(BIN / "codex"), "exec", "--json", "--skip-git-repo-check", "--cd", str(work)]
    bogus = "01a22e20-0000-7000-8000-000000000000"
    if mode == "lost_session":
        argv += ["resume", bogus]
    if mode == "resume_cd":
        argv += ["resume", bogus, "--cd", str(work)]
    return [*argv, "-"], env


def _claude(tmp: Path, url: str, mode: str, work: Path) -> tuple[list[str], dict[str, str]]:
    del work  # claude works in its cwd
    env = _env(
        tmp,
        {
            "CLAUDE_CONFIG_DIR": str(tmp / "claude"), "ANTHROPIC_BASE_URL": url,
            "CLAUDE_CODE_OAUTH_TOKEN": "sk-ant-oat01-mock", "CLAUDE_CODE_MAX_RETRIES": "0",
            "DISABLE_TELEMETRY": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        },
    )  # fmt: skip
    argv = [str(BIN / "claude"), "-p", "--output-format", "json"]
    return argv + (["--resume", BOGUS_UUID] if mode == "lost_session" else []), env


def _gemini(tmp: Path, url: str, mode: str, work: Path) -> tuple[list[str], dict[str, str]]:
    del work
    argv = [str(BIN / "gemini"), "--output-format", "json", "--approval-mode", "yolo"]
    argv += ["--resume", BOGUS_UUID] if mode == "lost_session" else []
    return [*argv, "--prompt", ""], _env(tmp, gemini_home(tmp, url))


def _opencode(tmp: Path, url: str, mode: str, work: Path) -> tuple[list[str], dict[str, str]]:
    argv = [str(BIN / "opencode"), "run", "--format", "json", "--print-logs"]
    argv += ["--log-level", "ERROR", "--dir", str(work)]
    argv += ["--session", "ses_00000000000000000000000000"] if mode == "lost_session" else []
    return argv, _env(tmp, opencode_home(tmp, url))


def _qwen(tmp: Path, url: str, mode: str, work: Path) -> tuple[list[str], dict[str, str]]:
    del work
    argv = [str(BIN / "qwen"), "--output-format", "json", "--approval-mode", "yolo"]
    argv += ["--resume", BOGUS_UUID] if mode == "lost_session" else []
    return argv, _env(tmp, qwen_home(tmp, url))


def _pi(tmp: Path, url: str, mode: str, work: Path) -> tuple[list[str], dict[str, str]]:
    del work
    argv = [str(BIN / "pi"), "-p", "--mode", "json"]
    argv += ["--session", BOGUS_UUID] if mode == "lost_session" else []
    return argv, _env(tmp, pi_home(tmp, url))


def _aider(tmp: Path, url: str, mode: str, work: Path) -> tuple[list[str], dict[str, str]]:
    """aider as the adapter runs it, in a git repository; ``ok`` resumes a chat history.

    ``ok`` is a resumed session (a history file with an earlier exchange, restored), as a
    goal's every turn after its first; ``lost_session`` names a history file that is not there.
    """
    identity = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com"}
    identity |= {"GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}
    subprocess.run(["git", "init", "-q", str(work)], check=True, timeout=30)
    history = tmp / "history" / "1-1.chat.md"
    history.parent.mkdir()
    if mode == "ok":
        history.write_text("#### say hello\n\nhello\n\n")
    argv = [str(PYTHON_CLIS["aider"] / "aider"), "--message-file", "/dev/stdin", *BASE_FLAGS]
    argv += ["--chat-history-file", str(history)]
    argv += ["--input-history-file", str(tmp / "history" / "input.history")]
    argv += ["--restore-chat-history", *AIDER_FLAGS.split()]
    return argv, {**_env(tmp, aider_home(tmp, url)), **RUN_ENV, **identity}


SETUPS = {
    "codex": _codex,
    "claude": _claude,
    "gemini": _gemini,
    "opencode": _opencode,
    "qwen": _qwen,
    "pi": _pi,
    "aider": _aider,
}


def _timeout(cli: str, mode: str) -> float:
    if cli == "codex" and mode == "unreachable":
        return 8
    if cli == "opencode" and mode in ("usage_limit", "429", "500", "unreachable"):
        return OPENCODE_RETRY_S
    if cli == "aider" and mode in ("usage_limit", "429", "500", "unreachable"):
        return AIDER_RETRY_S
    return 150


def capture(cli: str, mode: str) -> dict[str, object]:
    """One run of the real ``cli`` against the mock in ``mode``."""
    server = MockServer()
    server.model.mode = {"weekly_limit": "usage_limit", "lost_session": "ok"}.get(mode, mode)
    server.model.limit_claim = "seven_day" if mode == "weekly_limit" else "five_hour"
    server.model.reset_at = int(time.time()) + (3 * 86400 if mode == "weekly_limit" else 7200)
    if cli == "pi":
        server.model.retry_after = "1"  # pi waits out a 429's retry-after before it reports
    if cli == "aider" and mode == "tool":
        server.model.edits = AIDER_EDITS
    tmp = Path(tempfile.mkdtemp())
    work = tmp / "work"
    work.mkdir()
    if mode == "unreachable":
        server.unreachable()
    argv, env = SETUPS[cli](tmp, server.url, mode, work)
    out = _run(argv, env, work, timeout=_timeout(cli, mode))
    if mode != "unreachable":
        server.close()
    text = json.dumps(out).replace(str(tmp), "$TMP").replace(str(server.port), "$PORT")
    text = text.replace(str(REPO), "$REPO")
    return {"cli": cli, "version": PINNED[cli], "mode": mode, **json.loads(text)}


def _session_argv(cli: str, program: Path, work: Path, resume: str | None) -> list[str]:
    if cli == "codex":
        argv = [str(program), "exec", "--json", "--skip-git-repo-check", "--cd", str(work)]
        return [*argv, *(["resume", resume] if resume else []), "-"]
    if cli == "gemini":
        argv = [str(program), "--output-format", "json", "--approval-mode", "yolo"]
        return [*argv, *(["--resume", resume] if resume else []), "--prompt", ""]
    argv = [str(program), "-p", "--output-format", "json"]
    return [*argv, *(["--resume", resume] if resume else [])]


def _session_id(cli: str, stdout: str) -> str | None:
    if cli == "codex":
        for line in stdout.splitlines():
            event = json.loads(line) if line.startswith("{") else {}
            if event.get("type") == "thread.started":
                return str(event["thread_id"])
        return None
    start = stdout.find("{")
    return json.loads(stdout[start:]).get("session_id") if start >= 0 else None


def capture_session(cli: str, bin_dir: Path) -> dict[str, object]:
    """One session of ``cli`` from ``bin_dir``: a run, a resumed run, a resumed usage limit."""
    program = bin_dir / cli
    version = subprocess.run(
        [str(program), "--version"], capture_output=True, text=True, check=True, timeout=60
    ).stdout.split()[-1 if cli == "codex" else 0]
    server = MockServer()
    tmp = Path(tempfile.mkdtemp())
    work = tmp / "work"
    work.mkdir()
    env = _env(tmp, _session_env(cli, tmp, server.url))
    env["PATH"] = f"{bin_dir}:/usr/bin:/bin"
    runs: list[dict[str, object]] = []
    session = None
    for mode in ("ok", "ok", "usage_limit"):
        server.model.mode = mode
        server.model.reset_at = int(time.time()) + 7200
        run = _run(_session_argv(cli, program, work, session), env, work, timeout=90)
        session = session or _session_id(cli, str(run["stdout"]))
        runs.append({"mode": mode, **run})
    server.close()
    text = json.dumps(runs).replace(str(tmp), "$TMP").replace(str(server.port), "$PORT")
    return {"cli": cli, "version": version, "runs": json.loads(text.replace(str(REPO), "$REPO"))}


def _session_env(cli: str, tmp: Path, url: str) -> dict[str, str]:
    if cli == "gemini":
        return gemini_home(tmp, url)
    if cli == "codex":
        home = tmp / "codex-home"
        home.mkdir()
        (home / "config.toml").write_text(
            'model = "mock-model"\nmodel_provider = "mock"\n'
            '[model_providers.mock]\nname = "mock"\n'
            f'base_url = "{url}/v1"\nwire_api = "responses"\nenv_key = "MOCK_API_KEY"\n'
            "request_max_retries = 0\nstream_max_retries = 0\n"
        )
        return {"CODEX_HOME": str(home), "MOCK_API_KEY": "sk-mock"}
    return {
        "CLAUDE_CONFIG_DIR": str(tmp / "claude"), "ANTHROPIC_BASE_URL": url,
        "CLAUDE_CODE_OAUTH_TOKEN": "sk-ant-oat01-mock", "CLAUDE_CODE_MAX_RETRIES": "0",
        "DISABLE_TELEMETRY": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }  # fmt: skip


def sessions_main(args: list[str]) -> None:
    """``--sessions [--bin DIR] [CLI ...]``: record one session per CLI."""
    bin_dir = BIN
    if "--bin" in args:
        at = args.index("--bin")
        bin_dir = Path(args[at + 1]).resolve()
        del args[at : at + 2]
    out = CAPTURES / "sessions"
    out.mkdir(parents=True, exist_ok=True)
    for cli in args or ["codex", "claude", "gemini"]:
        record = capture_session(cli, bin_dir)
        path = out / f"{cli}-{record['version']}.json"
        path.write_text(json.dumps(record, indent=2, ensure_ascii=False) + "\n")
        print(path, [run["exit_code"] for run in record["runs"]])  # type: ignore[attr-defined]


def main() -> None:
    """Capture every mode of every CLI (or of those named on the command line)."""
    if sys.argv[1:2] == ["--sessions"]:
        sessions_main(sys.argv[2:])
        return
    CAPTURES.mkdir(exist_ok=True)
    only = set(sys.argv[1:])  # e.g. `python -m tests.realhosts.capture gemini`
    for cli, modes in (
        ("codex", CODEX_MODES),
        ("claude", CLAUDE_MODES),
        ("gemini", GEMINI_MODES),
        ("opencode", CHAT_MODES),
        ("qwen", CHAT_MODES),
        ("pi", CHAT_MODES),
        ("aider", CHAT_MODES),
    ):
        if only and cli not in only:
            continue
        for mode in modes:
            record = capture(cli, mode)
            path = CAPTURES / f"{cli}-{mode}.json"
            path.write_text(json.dumps(record, indent=2, ensure_ascii=False) + "\n")
            print(path, record["exit_code"])


if __name__ == "__main__":
    main()
