"""A worktree goal on the dashboard: its state route, "merge waiting", and Merge from the page."""

from __future__ import annotations

import json

from loopx.model import utcnow
from loopx.process import ProcessIdentity
from loopx.registry.goals import get_goal
from loopx.testing.status_fixtures import make_goal, register_goals
from loopx.web.actions import audit_file
from loopx.web.worktrees import MAX_AGE_S, WorktreeStates
from loopx.worktree.mergejournal import MergeJournal, MergeMode, write_merge_journal
from tests.test_dashboard_panels import AUTH, JSON_AUTH, _served, call, git, worktree_goal
from tests.turnkit import loopx_here


def test_a_done_goals_unmerged_branch_is_its_state_and_a_merge_waiting_card(layout, tmp_path):
    """Branch, base, ahead, clean, the diff and the newest commit; listed under Needs you."""
    worktree_goal(layout, tmp_path, merge=False)
    register_goals(layout, [make_goal("plain", now=utcnow(), workdir=tmp_path)])
    with _served(layout) as server:
        status, doc, _ = call(server, "GET", "/api/goals/wt/worktree", AUTH)
        _, overview, _ = call(server, "GET", "/api/overview", AUTH)
        plain = call(server, "GET", "/api/goals/plain/worktree", AUTH)
        unknown = call(server, "GET", "/api/goals/nope/worktree", AUTH)
        anonymous = call(server, "GET", "/api/goals/wt/worktree")
    assert status == 200
    view = doc["panel"]["view"]
    assert (view["branch"], view["base"], view["ahead"], view["behind"]) == (
        "loopx/wt",
        "main",
        1,
        0,
    )
    # The demo host leaves its untracked counter in the worktree: not clean, and named.
    assert (view["dirty"], view["changes"][0]) == (True, ".loopx-demo/counter.json")
    diff = doc["diff"]
    assert (diff["files"], diff["insertions"], diff["deletions"]) == (1, 1, 0)
    assert "feature.txt" in diff["paths"]
    assert diff["commits"][0]["subject"] == "the work"
    assert (doc["goal_status"], doc["merge_waiting"]) == ("done", True)
    assert [m["goal_id"] for m in overview["merge_waiting"]] == ["wt"]
    assert overview["merge_waiting_total"] == 1
    assert (plain[0], unknown[0], anonymous[0]) == (404, 404, 401)
    assert "has no worktree" in plain[1]["error"]


def test_merge_from_the_page_lands_is_audited_and_ends_the_wait(layout, tmp_path):
    """POST merge: the base moves, the reply carries the journal, the card goes, the audit says so."""
    worktree_goal(layout, tmp_path, merge=False)
    with _served(layout) as server:
        status, doc, _ = call(server, "POST", "/api/goals/wt/merge", JSON_AUTH, b"{}")
        _, after, _ = call(server, "GET", "/api/goals/wt/worktree", AUTH)
        _, overview, _ = call(server, "GET", "/api/overview", AUTH)
    assert status == 200, doc
    assert (doc["action"], doc["merge"]["outcome"]) == ("merge", "merged")
    assert (after["panel"]["view"]["ahead"], after["merge_waiting"]) == (0, False)
    assert after["panel"]["merge"]["outcome"] == "merged"
    assert overview["merge_waiting"] == []
    line = json.loads(audit_file(layout).read_text().splitlines()[-1])
    assert (line["action"], line["outcome"]) == ("merge", "applied")
    assert line["detail"].startswith(f"merge merged as {doc['merge']['merged_commit'][:12]}")


def test_a_merge_of_a_goal_that_is_not_done_is_refused_in_words(layout, tmp_path):
    """409 with the kernel's sentence; nothing moves; the refusal is a `failed` audit line."""
    worktree_goal(layout, tmp_path, merge=False)
    assert loopx_here(layout.root, "goal", "reopen", "wt", "--yes").returncode == 0
    with _served(layout) as server:
        status, doc, _ = call(server, "POST", "/api/goals/wt/merge", JSON_AUTH, b"{}")
        _, state, _ = call(server, "GET", "/api/goals/wt/worktree", AUTH)
    assert status == 409
    assert "not done" in doc["error"]
    assert (state["panel"]["view"]["ahead"], state["merge_waiting"]) == (1, False)
    line = json.loads(audit_file(layout).read_text().splitlines()[-1])
    assert (line["action"], line["outcome"]) == ("merge", "failed")
    assert "not done" in line["detail"]


def test_a_state_is_kept_until_its_files_change_or_it_ages(layout, tmp_path):
    """A commit git alone knows of shows after MAX_AGE_S; a merge journal's change at once."""
    tree = worktree_goal(layout, tmp_path, merge=False)
    now = [0.0]
    states = WorktreeStates(layout, clock=lambda: now[0])
    goal = get_goal(layout, "wt")
    first = states.state(goal, None)
    (tree / "more.txt").write_text("more\n")
    git(tree, "add", "more.txt")
    git(tree, "commit", "-q", "-m", "more work")
    assert states.state(goal, None) is first  # nothing LoopX writes changed: git not asked
    now[0] = MAX_AGE_S + 1
    aged = states.state(goal, None)
    assert aged.panel.view is not None
    assert (first.panel.view.ahead if first.panel.view else None, aged.panel.view.ahead) == (1, 2)
    waiting, total = states.merge_waiting([(goal, None)])
    assert (total, waiting[0].ahead) == (1, 2)


def test_a_merge_whose_process_is_gone_leaves_the_goal_merge_waiting(layout, tmp_path):
    """A pending merge of a live process is not waiting; once that process is gone, it is."""
    worktree_goal(layout, tmp_path, merge=False)
    goal = get_goal(layout, "wt")
    now = utcnow()
    pending = MergeJournal(
        goal_id="wt", repo=str(tmp_path / "repo"), base="main", branch="loopx/wt",
        mode=MergeMode.MERGE, base_old="0" * 40, branch_head="1" * 40,
        scratch=str(tmp_path / "scratch"), created_at=now, updated_at=now,
    )  # fmt: skip
    me = ProcessIdentity.current()
    write_merge_journal(
        layout, pending.model_copy(update={"owner_pid": me.pid, "owner_started": me.started_at})
    )
    states = WorktreeStates(layout)
    running = states.state(goal, None)
    write_merge_journal(
        layout, pending.model_copy(update={"owner_pid": me.pid, "owner_started": 1.0})
    )
    gone = states.state(goal, None)
    assert (running.merge_waiting, running.merge_interrupted) == (False, False)
    assert (gone.merge_waiting, gone.merge_interrupted) == (True, True)
    waiting, _ = states.merge_waiting([(goal, None)])
    assert waiting[0].interrupted
