"""Real git repositories for tests, and a command host that edits and commits.

The host, ``python -m loopx.testing.gitwork``, is a host of the protocol in
docs/host-protocol.md: each turn it appends a line to ``FILE`` in its working
directory (the goal's worktree for a ``--worktree`` goal), commits it, and
reports ``progress`` until the file has ``TURNS`` lines, then ``completed``.
With ``--log DIR`` it appends each turn's start and end, its cwd and branch
to ``DIR/<goal>.jsonl``, so a test reads when turns overlapped. With
``--hold S`` it sleeps S seconds inside the turn (two goals' turns then
overlap only if they really run at once). Arguments::

    python -m loopx.testing.gitwork FILE [--turns N] [--hold S] [--log DIR] [--text T]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from loopx import environ

IDENTITY = {
    "GIT_AUTHOR_NAME": "Test",
    "GIT_AUTHOR_EMAIL": "test@example.invalid",
    "GIT_COMMITTER_NAME": "Test",
    "GIT_COMMITTER_EMAIL": "test@example.invalid",
}


def git(where: Path, *args: str, env: Mapping[str, str] | None = None) -> str:
    """Run git in ``where`` (a test's identity, no global config); its stdout."""
    full = {**os.environ, **IDENTITY, "GIT_CONFIG_GLOBAL": os.devnull, **(env or {})}
    for name in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
        full.pop(name, None)
    done = subprocess.run(  # a fixed program, never a shell
        ["git", "-C", str(where), *args],
        capture_output=True,
        text=True,
        env=full,
        check=False,
    )
    if done.returncode != 0:
        msg = f"git {' '.join(args)} in {where}: {done.stderr.strip()}"
        raise RuntimeError(msg)
    return done.stdout.strip()


def make_repo(path: Path, files: Mapping[str, str] | None = None, *, branch: str = "main") -> Path:
    """A git repository at ``path`` with one commit of ``files`` on ``branch``."""
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", branch)
    git(path, "config", "user.name", "Test")
    git(path, "config", "user.email", "test@example.invalid")
    for name, text in (files or {"README": "hello\n"}).items():
        target = path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "initial")
    return path


def commit_file(repo: Path, name: str, text: str, message: str = "change") -> str:
    """Write ``name`` in ``repo``, commit it; the new commit."""
    target = repo / name
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    git(repo, "add", name)
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def host_argv(file: str, *, turns: int = 1, hold_s: float = 0.0, log: Path | None = None,
              text: str | None = None) -> list[str]:  # fmt: skip
    """The argv of this module's host."""
    argv = [sys.executable, "-m", "loopx.testing.gitwork", file, "--turns", str(turns)]
    if hold_s:
        argv += ["--hold", str(hold_s)]
    if log is not None:
        argv += ["--log", str(log)]
    if text is not None:
        argv += ["--text", text]
    return argv


def _log(directory: str | None, goal_id: str, record: dict[str, object]) -> None:
    if directory is None:
        return
    with (Path(directory) / f"{goal_id}.jsonl").open("a") as f:
        f.write(json.dumps(record) + "\n")


def main(argv: list[str] | None = None) -> int:
    """Append a line to FILE, commit it, report progress or completed."""
    parser = argparse.ArgumentParser(prog="gitwork")
    parser.add_argument("file")
    parser.add_argument("--turns", type=int, default=1)
    parser.add_argument("--hold", type=float, default=0.0)
    parser.add_argument("--log")
    parser.add_argument("--text")
    args = parser.parse_args(argv)
    envelope = json.loads(sys.stdin.read())
    cwd = Path.cwd()
    goal_id = envelope["goal_id"]
    started = time.time()
    if args.hold:
        time.sleep(args.hold)
    target = cwd / args.file
    lines = target.read_text().splitlines() if target.exists() else []
    lines.append(args.text or f"{goal_id} turn {envelope['seq']}")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("\n".join(lines) + "\n")
    git(cwd, "add", args.file)
    git(cwd, "commit", "-q", "-m", f"{goal_id}: turn {envelope['seq']}")
    branch = git(cwd, "rev-parse", "--abbrev-ref", "HEAD")
    _log(args.log, goal_id, {"start": started, "end": time.time(), "cwd": str(cwd),
                             "branch": branch, "seq": envelope["seq"]})  # fmt: skip
    done = len(lines) >= args.turns
    result = {
        "kind": "completed" if done else "progress",
        "summary": f"{len(lines)} line(s) in {args.file} on {branch}",
        "next_action": None if done else "add the next line",
    }
    Path(os.environ[environ.RESULT_FILE]).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
