"""Shared set-up of the worktree and merge tests: a repository, a committing goal, its runs."""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path
from typing import Any

from loopx.testing.gitwork import git, host_argv, make_repo
from tests.turnkit import loopx, loopx_here


def repo_with_ignored_env(path: Path) -> Path:
    """A repository on ``main`` with a tracked file and an ignored, untracked ``.env``."""
    make_repo(path, {"README": "hello\n", ".gitignore": ".env\n"})
    (path / ".env").write_text("TOKEN=local\n")
    return path


def add_goal(root: Path, goal_id: str, repo: Path, *extra: str, turns: int = 1,
             hold_s: float = 0.0, log: Path | None = None, file: str = "notes.txt",
             text: str | None = None) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """`goal add ID --workdir REPO --worktree` with the committing host (in this process)."""
    host = shlex.join(host_argv(file, turns=turns, hold_s=hold_s, log=log, text=text))
    return loopx_here(root, "goal", "add", goal_id, "--objective", "add lines", "--workdir",
                      str(repo), "--worktree", "--host", host, *extra)  # fmt: skip


def run_turn(root: Path, goal_id: str, **env: str) -> subprocess.CompletedProcess[str]:
    """One real `loopx turn run-once` process."""
    return loopx(root, "turn", "run-once", goal_id, timeout=120, **env)


def worktree(root: Path, goal_id: str) -> dict[str, Any]:
    """`loopx goal worktree ID --json`."""
    proc = loopx_here(root, "goal", "worktree", goal_id, "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def goal_doc(root: Path, goal_id: str) -> dict[str, Any]:
    """`loopx goal show ID --json`."""
    proc = loopx_here(root, "goal", "show", goal_id, "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def head(repo: Path, ref: str = "main") -> str:
    """The commit ``ref`` names."""
    return git(repo, "rev-parse", ref)


def tree(repo: Path, ref: str = "main") -> str:
    """The tree of ``ref``."""
    return git(repo, "rev-parse", f"{ref}^{{tree}}")


def worktree_paths(repo: Path) -> list[str]:
    """Every worktree git knows of ``repo``."""
    return [
        line.split(" ", 1)[1]
        for line in git(repo, "worktree", "list", "--porcelain").splitlines()
        if line.startswith("worktree ")
    ]
