"""`goal merge` moves the base only after the check passes on the merged tree."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from loopx import exitcodes
from loopx.testing.gitwork import commit_file, git
from tests.conftest import Cli
from tests.gitkit import add_goal, goal_doc, head, repo_with_ignored_env, run_turn, tree
from tests.turnkit import loopx, loopx_here

pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def cli_root(cli: Cli) -> Path:
    """An initialised root."""
    return cli.root


def done_goal(root: Path, repo: Path, *extra: str, goal_id: str = "g1") -> None:
    """A worktree goal that committed one line on its branch and completed."""
    assert add_goal(root, goal_id, repo, *extra).returncode == 0
    proc = run_turn(root, goal_id)
    assert proc.returncode == 0, proc.stderr
    assert goal_doc(root, goal_id)["goal"]["status"] == "done"


def merge(root: Path, *args: str, **env: str) -> tuple[int, dict[str, Any] | None, str]:
    """A real `loopx goal merge g1 --json` process: exit code, journal, stderr."""
    proc = loopx(root, "goal", "merge", "g1", "--json", *args, timeout=120, **env)
    document = json.loads(proc.stdout) if proc.stdout.strip() else None
    return proc.returncode, document, proc.stderr


def test_merge_runs_the_check_on_the_merged_tree_then_moves_the_base(
    cli_root: Path, tmp_path: Path
) -> None:
    """The check sees both sides; the base's checkout then shows the merged tree."""
    repo = repo_with_ignored_env(tmp_path / "repo")
    # Passes in the goal's worktree (no base.txt needed there) and on the merged tree.
    check = "sh -c 'test -f notes.txt && { test -f base.txt || test ! -d ../.merge; }'"
    done_goal(cli_root, repo, "--done-check", check)
    commit_file(repo, "base.txt", "moved on\n", "base moves")  # not a fast-forward any more
    old = head(repo)
    code, journal, err = merge(cli_root)
    assert code == 0, err
    assert journal is not None
    assert (journal["outcome"], journal["step"], journal["base_old"]) == ("merged", "finished", old)
    assert journal["check"]["passed"] is True
    assert head(repo) == journal["merged_commit"]
    assert git(repo, "rev-list", "--parents", "-n1", "main").split()[1:] == [
        old,
        head(repo, "loopx/g1"),
    ]
    assert (repo / "notes.txt").read_text() == "g1 turn 1\n"  # the checkout followed
    assert git(repo, "status", "--porcelain", "--untracked-files=no") == ""
    assert not (cli_root / "worktrees" / ".merge" / "g1").exists()


def test_a_check_failing_on_the_merged_tree_leaves_the_base_and_opens_a_gate(
    cli_root: Path, tmp_path: Path
) -> None:
    """The base is untouched, the gate holds the check's output, the goal goes back to work."""
    repo = repo_with_ignored_env(tmp_path / "repo")
    done_goal(cli_root, repo, "--done-check", "sh -c 'if test -f bad.txt; then echo bad.txt breaks it; exit 3; fi'")  # fmt: skip
    commit_file(repo, "bad.txt", "x\n", "base breaks the goal's check")
    old = head(repo)
    code, journal, _ = merge(cli_root)
    assert code == exitcodes.NEEDS_HUMAN
    assert journal is not None and journal["outcome"] == "check_failed"
    assert journal["check"]["exit_code"] == 3
    assert head(repo) == old
    doc = goal_doc(cli_root, "g1")
    assert doc["goal"]["status"] == "active"
    (gate,) = [g for g in doc["state"]["gates"] if g["answer"] is None]
    assert "bad.txt breaks it" in gate["question"] and gate["id"] == journal["gate_id"]


def test_a_conflict_leaves_the_base_and_opens_a_gate_naming_the_files(
    cli_root: Path, tmp_path: Path
) -> None:
    """Answering the gate gives the goal back to its agent."""
    repo = repo_with_ignored_env(tmp_path / "repo")
    done_goal(cli_root, repo)
    commit_file(repo, "notes.txt", "the base's own line\n", "base edits the same file")
    old = head(repo)
    code, journal, _ = merge(cli_root)
    assert code == exitcodes.NEEDS_HUMAN
    assert journal is not None
    assert (journal["outcome"], journal["conflicts"]) == ("conflict", ["notes.txt"])
    assert head(repo) == old and (repo / "notes.txt").read_text() == "the base's own line\n"
    doc = goal_doc(cli_root, "g1")
    (gate,) = [g for g in doc["state"]["gates"] if g["answer"] is None]
    assert "conflicts in: notes.txt" in gate["question"]
    assert loopx_here(cli_root, "gate", "resolve", "g1", "--answer", "go on").returncode == 0
    status = json.loads(loopx_here(cli_root, "status", "--json").stdout)
    (view,) = [g for g in status["goals"] if g["goal_id"] == "g1"]
    assert view["actor"] == "agent"


def test_a_base_with_uncommitted_changes_is_refused_and_nothing_moves(
    cli_root: Path, tmp_path: Path
) -> None:
    """One error line with a hint, exit 2, no journal step past nothing."""
    repo = repo_with_ignored_env(tmp_path / "repo")
    done_goal(cli_root, repo)
    (repo / "README").write_text("edited, not committed\n")
    old = head(repo)
    code, journal, err = merge(cli_root)
    assert code == exitcodes.USAGE and journal is None
    assert "base main has uncommitted changes" in err and "hint:" in err
    assert head(repo) == old and not (cli_root / "goals" / "g1" / "merge.json").exists()


def test_ff_mode_refuses_a_base_that_moved(cli_root: Path, tmp_path: Path) -> None:
    """--mode ff cannot fast-forward a base with commits of its own."""
    repo = repo_with_ignored_env(tmp_path / "repo")
    done_goal(cli_root, repo)
    commit_file(repo, "base.txt", "x\n")
    code, _, err = merge(cli_root, "--mode", "ff")
    assert code == exitcodes.USAGE and "fast-forward is impossible" in err


def test_auto_merge_merges_on_completion(cli_root: Path, tmp_path: Path) -> None:
    """`--auto-merge`: the turn that completes the goal merges it through the same path."""
    repo = repo_with_ignored_env(tmp_path / "repo")
    done_goal(cli_root, repo, "--auto-merge", "--done-check", "test -f notes.txt")
    assert (repo / "notes.txt").read_text() == "g1 turn 1\n"
    journal = json.loads((cli_root / "goals" / "g1" / "merge.json").read_text())
    assert journal["outcome"] == "merged" and head(repo) == journal["merged_commit"]


def _final(root: Path, repo: Path) -> tuple[object, ...]:
    journal = json.loads((root / "goals" / "g1" / "merge.json").read_text())
    doc = goal_doc(root, "g1")
    return (
        tree(repo),
        len(git(repo, "rev-list", "--parents", "-n1", "main").split()),
        git(repo, "log", "--format=%s", "main"),
        (repo / "notes.txt").read_text() if (repo / "notes.txt").exists() else None,
        git(repo, "status", "--porcelain", "--untracked-files=no"),
        journal["step"],
        journal["outcome"],
        journal["check"],
        doc["goal"]["status"],
        [g["question"] for g in doc["state"]["gates"]],
        (root / "worktrees" / ".merge" / "g1").exists(),
    )


@pytest.mark.parametrize("point", ["planned", "merged", "checked", "moved", "synced", "finished"])
@pytest.mark.parametrize("how", ["recover", "rerun"])
def test_killed_at_each_merge_step_recovery_converges_to_the_undisturbed_merge(
    tmp_path: Path, point: str, how: str
) -> None:
    """After a kill the base is at its old or its merged commit; recovery ends where a calm run does."""
    results = []
    for name, fault in (("calm", None), ("crashed", f"merge:{point}")):
        root, repo = tmp_path / name / "root", repo_with_ignored_env(tmp_path / name / "repo")
        assert loopx_here(root, "init").returncode == 0
        done_goal(root, repo, "--done-check", "test -f notes.txt")
        commit_file(repo, "base.txt", "x\n", "base moves")
        old = head(repo)
        if fault is not None:
            code, _, err = merge(root, LOOPX_FAULT=fault)
            assert code == exitcodes.FAULT, err
            journal = json.loads((root / "goals" / "g1" / "merge.json").read_text())
            assert head(repo) in {old, journal["merged_commit"]}  # never a half-merge
            if how == "recover":
                proc = loopx(root, "recover", "--json")
                assert proc.returncode == 0, proc.stderr
                assert json.loads(proc.stdout)["merges"] == ([] if point == "finished" else ["g1"])
            else:
                code, _, err = merge(root)
                assert code == 0, err
        else:
            code, _, err = merge(root)
            assert code == 0, err
        results.append(_final(root, repo))
    assert results[0] == results[1]


def test_the_dashboard_merge_action_takes_the_same_path(cli_root: Path, tmp_path: Path) -> None:
    """`perform(..., Action.MERGE)` merges through `loopx goal merge` and returns its journal."""
    from loopx.api._serve import action_calls
    from loopx.model import utcnow
    from loopx.root import Layout
    from loopx.web.actions import Action, ActionRequest, perform

    repo = repo_with_ignored_env(tmp_path / "repo")
    done_goal(cli_root, repo)
    layout = Layout.at(cli_root)
    result = perform(
        action_calls(layout), layout, "g1", Action.MERGE, ActionRequest(), now=utcnow()
    )
    assert result.merge is not None and result.merge.outcome == "merged"
    assert head(repo) == result.merge.merged_commit


def test_merges_of_one_repository_run_one_at_a_time(cli_root: Path, tmp_path: Path) -> None:
    """Two merges at once: the lock serialises them, the second merges onto the first's result."""
    import subprocess
    import sys

    repo = repo_with_ignored_env(tmp_path / "repo")
    log = tmp_path / "checks.log"
    check = f"sh -c 'echo start $(date +%s.%N) >> {log}; sleep 1; echo end $(date +%s.%N) >> {log}'"
    for goal_id in ("a", "b"):
        done = add_goal(cli_root, goal_id, repo, "--done-check", check, file=f"{goal_id}.txt")
        assert done.returncode == 0, done.stderr
        assert run_turn(cli_root, goal_id).returncode == 0
    log.write_text("")  # the checks of the completing turns are not the merges'
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "loopx", "--root", str(cli_root), "goal", "merge", g],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for g in ("a", "b")
    ]
    outputs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err for _, err in outputs]
    marks = [line.split() for line in log.read_text().splitlines()]
    assert [m[0] for m in marks] == ["start", "end", "start", "end"]  # never two at once
    assert (repo / "a.txt").exists() and (repo / "b.txt").exists()


def test_squash_makes_one_commit_on_the_base(cli_root: Path, tmp_path: Path) -> None:
    """--mode squash: the base gets one new commit with the branch's changes, one parent."""
    repo = repo_with_ignored_env(tmp_path / "repo")
    done_goal(cli_root, repo)
    old = head(repo)
    code, journal, err = merge(cli_root, "--mode", "squash")
    assert code == 0, err
    assert journal is not None and journal["outcome"] == "merged"
    assert git(repo, "rev-list", "--parents", "-n1", "main").split()[1:] == [old]
    assert (repo / "notes.txt").read_text() == "g1 turn 1\n"
