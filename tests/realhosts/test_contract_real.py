"""The live half of the host contract: every real CLI takes a goal to done over three turns.

Each pinned CLI (.ci/setup.d/realhosts.sh) drives one goal in its own git worktree against
the mock model: turn one writes ``app.py`` and commits it, turn two writes a failing test
and commits it, turn three fixes ``app.py``, runs the test and commits; the done-check
(the test) then passes and the goal is done. Each turn's prompt carries the state the
previous one left, the CLI resumes its session where it has one, the turns report
tokens, and no process of a turn outlives it. aider runs no shell commands: the mock
answers it with the same files in its edit format (:data:`AIDER_TURNS`), aider writes and
commits them itself, and its session is its chat history, restored. The recorded half is
tests/test_host_contract.py.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from loopx import environ
from loopx.process import find_by_env
from loopx.testing.gitwork import IDENTITY, git, make_repo
from tests.realhosts.conftest import AIDER_FLAGS, add_goal, goal_state, run_once

pytestmark = [pytest.mark.realhosts, pytest.mark.timeout(180)]

CHAT = "/v1/chat/completions"
# kind -> (its environment fixture, the path its model requests go to, the flags that let it
# run shell commands and commit in the worktree without asking; docs/hosts.md).
KINDS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "codex": ("codex_env", "/v1/responses", ("--host=--dangerously-bypass-approvals-and-sandbox",)),
    "claude": ("claude_env", "/v1/messages", ("--host=--allowedTools Bash",)),
    "gemini": (
        "gemini_env",
        "/v1beta/models/gemini-mock:streamGenerateContent",
        ("--host=--approval-mode yolo",),
    ),
    "opencode": ("opencode_env", CHAT, ()),
    "qwen": ("qwen_env", CHAT, ("--host=--approval-mode yolo",)),
    "pi": ("pi_env", CHAT, ()),
    "aider": ("aider_env", CHAT, (f"--host={AIDER_FLAGS}",)),
}
PY = sys.executable
TURNS = (
    (
        (
            "printf 'def add(a, b):\\n    return a - b\\n' > app.py && git add app.py"
            " && git commit -qm 'add app.py'"
        ),
        {
            "kind": "progress",
            "summary": "wrote app.py with add",
            "next_action": "write test_app.py for add",
            "state_patch": {"beliefs": ["app.py defines add(a, b)"]},
        },
    ),
    (
        (
            "printf 'import app\\nassert app.add(2, 2) == 4, app.add(2, 2)\\nprint(\"4 ok\")\\n'"
            f" > test_app.py && ({PY} test_app.py || true) && git add test_app.py"
            " && git commit -qm 'test add'"
        ),
        {
            "kind": "progress",
            "summary": "test_app.py fails: add subtracts",
            "next_action": "fix add in app.py so test_app.py passes",
            "state_patch": {"beliefs": ["test_app.py fails: add(2, 2) is 0"]},
        },
    ),
    (
        f"sed -i 's/a - b/a + b/' app.py && {PY} test_app.py && git commit -qam 'fix add'",
        {"kind": "completed", "summary": "add is fixed; test_app.py passes"},
    ),
)

# What each of TURNS leaves in the worktree, as aider's edits: the files and the commit message.
AIDER_TURNS = (
    ({"app.py": "def add(a, b):\n    return a - b\n"}, "add app.py"),
    (
        {"test_app.py": 'import app\nassert app.add(2, 2) == 4, app.add(2, 2)\nprint("4 ok")\n'},
        "test add",
    ),
    ({"app.py": "def add(a, b):\n    return a + b\n"}, "fix add"),
)


def _sent(requests: list[Any]) -> str:
    return json.dumps([r.body for r in requests])


def _no_turn_process_left(root: Path) -> None:
    left = find_by_env(str(root), {environ.TURN_KEY: None})
    assert not left, [p.cmdline() for p in left]


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_three_turns_edit_test_and_commit_to_done(cli, mock, tmp_path, request, kind):
    """The goal's worktree gets three commits, the state is carried, the session resumed, done."""
    fixture, path, flags = KINDS[kind]
    env = {**request.getfixturevalue(fixture), **IDENTITY}
    work = make_repo(tmp_path / "repo", {"README": "add numbers\n"})
    add_goal(cli, env, "t1", kind, work, "--worktree", f"--done-check={PY} test_app.py", *flags)
    tree = cli.root / "worktrees" / "t1"
    mock.model.mode = "tool"
    sessions, reports, sent = [], [], []
    for (command, answer), (edits, message) in zip(TURNS, AIDER_TURNS, strict=True):
        before = len(mock.model.model_requests(path))
        mock.model.command, mock.model.answer = command, json.dumps(answer)
        mock.model.edits, mock.model.commit_message = edits, message
        reports.append(run_once(cli, "t1", env))
        sent.append(_sent(mock.model.model_requests(path)[before:]))
        sessions.append(goal_state(cli, "t1")["host_session"])
        _no_turn_process_left(cli.root)
    assert [(r["status"], r["kind"]) for r in reports] == [
        ("committed", "progress"),
        ("committed", "progress"),
        ("committed", "completed"),
    ], reports
    assert cli.json("goal", "show", "t1")["goal"]["status"] == "done"
    log = git(tree, "log", "--format=%s", "-3").splitlines()
    assert log == ["fix add", "test add", "add app.py"]
    # the state the previous turn left is in the next turn's prompt
    assert "write test_app.py for add" in sent[1]
    assert "app.py defines add(a, b)" in sent[1]
    assert "fix add in app.py so test_app.py passes" in sent[2]
    # one CLI session over the three turns, resumed: turn one's answer is in turn three's history
    assert len({s["session_id"] for s in sessions}) == 1, sessions
    assert [s["turns"] for s in sessions] == [1, 2, 3]
    assert "wrote app.py with add" in sent[2]
    assert all(r["usage"]["input_tokens"] > 0 for r in reports), [r["usage"] for r in reports]
