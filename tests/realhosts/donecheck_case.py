"""The done-check case the codex and claude suites share: a false `completed`, then a true one.

The goal runs in its own git worktree (`--worktree`), as an agent fixing a repository would.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from loopx.testing.gitwork import make_repo
from tests.realhosts.conftest import add_goal, goal_state, run_once

CHECK = (
    "import os, sys\n"
    "if os.path.exists('fixed'):\n"
    "    print('4 passed'); sys.exit(0)\n"
    "print('FAILED tests/test_app.py::test_sum - assert 3 == 4\\n1 failed, 3 passed'); sys.exit(1)\n"
)
COMPLETED = json.dumps({"kind": "completed", "summary": "the tests pass now"})


def false_then_true_completed(
    cli: Any, env: dict[str, str], mock: Any, tmp_path: Path, *, kind: str, requests: str
) -> None:
    """A `completed` with a failing check is progress; the next request carries the check's output."""
    work = make_repo(tmp_path / "work", {"check.py": CHECK})  # in its own worktree
    add_goal(cli, env, "d1", kind, work, "--worktree", f"--done-check={sys.executable} check.py")
    tree = cli.root / "worktrees" / "d1"
    mock.model.answer = COMPLETED
    first = run_once(cli, "d1", env)
    assert (first["status"], first["kind"]) == ("committed", "progress"), first
    assert goal_state(cli, "d1")["next_action"] == "make the done-check pass"
    assert cli.json("goal", "show", "d1")["goal"]["status"] == "active"
    assert (tree / "check.py").is_file() and not (work / "fixed").exists()
    (tree / "fixed").write_text("")  # what the agent's next turn would do, in its worktree
    second = run_once(cli, "d1", env)
    sent = json.dumps(mock.model.model_requests(requests)[-1].body)
    assert "Done-check failed" in sent
    assert "1 failed, 3 passed" in sent
    assert str(tree) in sent  # the prompt's working directory is the worktree
    assert (second["status"], second["kind"]) == ("committed", "completed"), second
    assert cli.json("goal", "show", "d1")["goal"]["status"] == "done"
    assert goal_state(cli, "d1")["last_check"]["passed"] is True
