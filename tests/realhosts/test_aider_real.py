"""The real aider (pinned in .ci/setup.d/aider.sh) driven by LoopX against the mock model.

What the shared contract (test_contract_real.py) does not look at: aider commits its own
edits on the goal's branch (each with its ``Co-authored-by: aider`` trailer) and leaves nothing untracked in the
worktree, so the auto-merge brings them into the base; its session is the chat history file
in the goal's directory, whose earlier turns the model receives again; its tokens and cost
are the exact figures of its analytics log.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from loopx.testing.gitwork import IDENTITY, git, make_repo
from tests.realhosts.conftest import AIDER_FLAGS, add_goal, goal_state, run_once

pytestmark = [pytest.mark.realhosts, pytest.mark.timeout(180)]

CHAT = "/v1/chat/completions"
PY = sys.executable
# (aider's edits, its commit message, the turn's result) of each turn.
TURNS: tuple[tuple[dict[str, str], str, dict[str, Any]], ...] = (
    (
        {"app.py": "def add(a, b):\n    return a - b\n"},
        "add app.py",
        {"kind": "progress", "summary": "wrote app.py", "next_action": "write test_app.py"},
    ),
    (
        {"test_app.py": "import app\nassert app.add(2, 2) == 4, app.add(2, 2)\n"},
        "test add",
        {"kind": "progress", "summary": "test_app.py fails", "next_action": "fix add"},
    ),
    (
        {"app.py": "def add(a, b):\n    return a + b\n"},
        "fix add",
        {"kind": "completed", "summary": "add is fixed"},
    ),
)


def _edit_requests(mock: Any) -> list[list[dict[str, Any]]]:
    """The messages of each of aider's edit requests (not its commit messages or summaries)."""
    found = []
    for request in mock.model.model_requests(CHAT):
        messages = (request.body or {}).get("messages") or []
        system = " ".join(str(m.get("content")) for m in messages if m.get("role") == "system")
        if system.startswith("Act as an expert software developer"):
            found.append(messages)
    return found


def test_three_turns_commit_on_the_branch_resume_the_history_and_merge(
    cli, aider_env, mock, tmp_path
):
    """aider's commits are the goal's; each turn sees the ones before; the base gets them."""
    env = {**aider_env, **IDENTITY}
    repo = make_repo(tmp_path / "repo", {"README": "add numbers\n"})
    flags = (f"--done-check={PY} test_app.py", "--auto-merge", f"--host={AIDER_FLAGS}")
    add_goal(cli, env, "a1", "aider", repo, "--worktree", *flags)
    tree = cli.root / "worktrees" / "a1"
    reports, sessions, calls = [], [], []
    for edits, message, answer in TURNS:
        mock.model.edits, mock.model.commit_message = edits, message
        mock.model.answer = json.dumps(answer)
        before = len(_edit_requests(mock))
        reports.append(run_once(cli, "a1", env))
        calls.append(_edit_requests(mock)[before:])
        sessions.append(goal_state(cli, "a1")["host_session"])
        assert git(tree, "status", "--porcelain", "--untracked-files=all") == ""
    assert [(r["status"], r["kind"]) for r in reports] == [
        ("committed", "progress"),
        ("committed", "progress"),
        ("committed", "completed"),
    ], reports
    # aider's own commits, on the goal's branch, merged into the base once done
    log = git(tree, "log", "--format=%s|%(trailers:key=Co-authored-by,valueonly)", "-3")
    lines = [line.split("|") for line in log.splitlines() if line]
    assert [subject for subject, _ in lines] == ["fix add", "test add", "add app.py"]
    assert all(by.startswith("aider (openai/mock-model)") for _, by in lines), log
    assert cli.json("goal", "show", "a1")["goal"]["status"] == "done"
    assert "fix add" in git(repo, "log", "--format=%s", "main")
    assert (repo / "app.py").read_text() == TURNS[2][0]["app.py"]
    # one session: the chat history file in the goal's directory, restored on every later turn
    history = Path(sessions[0]["session_id"])
    assert history.parent == cli.root / "goals" / "a1" / "aider", history
    assert history.is_file()
    assert [(s["session_id"], s["turns"]) for s in sessions] == [
        (str(history), n) for n in (1, 2, 3)
    ]
    later = json.dumps(calls[2][0])
    assert "write test_app.py" in later  # turn one's answer, restored from the history
    assert "wrote app.py" in later
    assert "test_app.py fails" in later  # and turn two's
    # the exact figures aider's analytics log reported: the mock's usage at its model's prices
    # (more than one model call when aider adds a file the answer edits to the chat and asks
    # again, as it does for app.py in turn three)
    for report, sent in zip(reports, calls, strict=True):
        usage, n = report["usage"], len(sent)
        assert (usage["input_tokens"], usage["output_tokens"]) == (1200 * n, 80 * n), usage
        assert usage["cost_usd"] == pytest.approx(n * (1200 * 1e-6 + 80 * 2e-6)), usage
