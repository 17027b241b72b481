"""Merges always end: already-merged squashes, `--abort`, gates whose command works, doctor."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loopx import exitcodes
from loopx.model import utcnow
from loopx.root import ResolvedRoot, RootSource, open_root
from loopx.testing.gitwork import commit_file, git, make_repo
from loopx.worktree.mergejournal import MergeJournal, MergeMode
from loopx.worktree.mergerun import MergeRun
from tests.conftest import Cli
from tests.gitkit import goal_doc, head, repo_with_ignored_env, worktree_paths
from tests.test_merge import done_goal, merge
from tests.turnkit import loopx, loopx_here

pytestmark = pytest.mark.timeout(240)


def _scratch_gone(root: Path, repo: Path) -> bool:
    scratch = root / "worktrees" / ".merge" / "g1"
    return not scratch.exists() and str(scratch) not in worktree_paths(repo)


def test_a_squash_of_changes_the_base_has_ends_as_already_merged(cli: Cli, tmp_path: Path) -> None:
    """The base made the same change by itself: exit 0, nothing moves, the goal stays done."""
    repo = repo_with_ignored_env(tmp_path / "repo")
    done_goal(cli.root, repo)
    commit_file(repo, "notes.txt", "g1 turn 1\n", "the base makes the same change")
    old = head(repo)
    code, journal, err = merge(cli.root, "--mode", "squash")
    assert code == exitcodes.OK, err
    assert journal is not None
    assert (journal["outcome"], journal["step"]) == ("already_merged", "finished")
    assert head(repo) == old and _scratch_gone(cli.root, repo)
    assert goal_doc(cli.root, "g1")["goal"]["status"] == "done"
    line = loopx_here(cli.root, "goal", "merge", "g1", "--mode", "squash")
    assert line.returncode == 0 and "already merged" in line.stdout
    proc = loopx(cli.root, "recover", "--json")
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("point", ["merged", "moved"])
def test_abort_cancels_a_killed_merge_and_says_what_it_undid(
    cli: Cli, tmp_path: Path, point: str
) -> None:
    """Killed before or after the base moved: --abort leaves the base as it was, then merge works."""
    repo = repo_with_ignored_env(tmp_path / "repo")
    done_goal(cli.root, repo)
    old = head(repo)
    code, _, _ = merge(cli.root, LOOPX_FAULT=f"merge:{point}")
    assert code == exitcodes.FAULT
    proc = loopx(cli.root, "goal", "merge", "g1", "--abort", "--json")
    assert proc.returncode == 0, proc.stderr
    journal = json.loads(proc.stdout)
    assert (journal["step"], journal["outcome"]) == ("aborted", "aborted")
    assert any("scratch worktree" in what for what in journal["undone"])
    assert any("back" in what for what in journal["undone"]) == (point == "moved")
    assert head(repo) == old and not (repo / "notes.txt").exists()
    assert git(repo, "status", "--porcelain", "--untracked-files=all") == ""
    assert _scratch_gone(cli.root, repo)
    assert goal_doc(cli.root, "g1")["goal"]["status"] == "done"
    again = loopx_here(cli.root, "goal", "merge", "g1", "--abort")
    assert again.returncode == exitcodes.USAGE and "no merge in progress" in again.stderr
    code, journal, err = merge(cli.root)
    assert code == 0 and journal is not None and journal["outcome"] == "merged", err


def test_abort_finds_a_move_a_kill_left_unrecorded(cli: Cli, tmp_path: Path) -> None:
    """Killed inside the move, after `update-ref` but before the journal said so: moved back."""
    repo = repo_with_ignored_env(tmp_path / "repo")
    done_goal(cli.root, repo)
    old = head(repo)
    assert merge(cli.root, LOOPX_FAULT="merge:checked")[0] == exitcodes.FAULT
    merged = json.loads((cli.root / "goals" / "g1" / "merge.json").read_text())["merged_commit"]
    git(repo, "update-ref", "refs/heads/main", merged, old)  # what the killed move did
    proc = loopx(cli.root, "goal", "merge", "g1", "--abort", "--json")
    assert proc.returncode == 0, proc.stderr
    assert any(what.startswith("moved main back") for what in json.loads(proc.stdout)["undone"])
    assert head(repo) == old
    assert git(repo, "status", "--porcelain", "--untracked-files=all") == ""


def test_abort_prints_what_it_undid(cli: Cli, tmp_path: Path) -> None:
    """The human line names the abort and where the base is."""
    repo = repo_with_ignored_env(tmp_path / "repo")
    done_goal(cli.root, repo)
    assert merge(cli.root, LOOPX_FAULT="merge:merged")[0] == exitcodes.FAULT
    proc = loopx_here(cli.root, "goal", "merge", "g1", "--abort")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("aborted the merge of loopx/g1 into main: removed the scratch")


def test_a_base_moved_gate_names_goal_merge_which_then_works(cli: Cli, tmp_path: Path) -> None:
    """The goal stays done; the command the gate names merges it and answers the gate."""
    repo = repo_with_ignored_env(tmp_path / "repo")
    mark = tmp_path / "moved-once"
    # Moves the base once, from inside the merge's check (the scratch is under .merge/).
    check = (
        f"sh -c 'case $PWD in */.merge/*) test -e {mark} || {{ touch {mark}; "
        f"git -C {repo} commit -q --allow-empty -m elsewhere; }};; esac; true'"
    )
    done_goal(cli.root, repo, "--done-check", check)
    code, journal, _ = merge(cli.root)
    assert code == exitcodes.NEEDS_HUMAN
    assert journal is not None and journal["outcome"] == "base_moved"
    doc = goal_doc(cli.root, "g1")
    (gate,) = [g for g in doc["state"]["gates"] if g["answer"] is None]
    assert doc["goal"]["status"] == "done" and "`loopx goal merge g1`" in gate["question"]
    code, journal, err = merge(cli.root)
    assert code == 0, err
    assert journal is not None and journal["outcome"] == "merged"
    assert (repo / "notes.txt").read_text() == "g1 turn 1\n"
    assert [g for g in goal_doc(cli.root, "g1")["state"]["gates"] if g["answer"] is None] == []


def test_a_conflict_gate_names_gate_resolve_which_then_works(cli: Cli, tmp_path: Path) -> None:
    """The goal's work must change: the gate names `gate resolve`, which gives it to its agent."""
    repo = repo_with_ignored_env(tmp_path / "repo")
    done_goal(cli.root, repo)
    commit_file(repo, "notes.txt", "the base's own line\n", "base edits the same file")
    assert merge(cli.root)[0] == exitcodes.NEEDS_HUMAN
    (gate,) = [g for g in goal_doc(cli.root, "g1")["state"]["gates"] if g["answer"] is None]
    assert "`loopx gate resolve g1 --answer TEXT`" in gate["question"]
    proc = loopx_here(cli.root, "gate", "resolve", "g1", "--answer", "merged main in")
    assert proc.returncode == 0, proc.stderr
    doc = goal_doc(cli.root, "g1")
    assert doc["goal"]["status"] == "active" and doc["state"]["gates"][0]["answer"] is not None


def test_doctor_reports_a_merge_whose_process_died(cli: Cli, tmp_path: Path) -> None:
    """A killed merge is a warning naming both commands; recover finishes it; doctor is quiet."""
    repo = repo_with_ignored_env(tmp_path / "repo")
    done_goal(cli.root, repo)
    assert merge(cli.root, LOOPX_FAULT="merge:merged")[0] == exitcodes.FAULT
    report = json.loads(loopx_here(cli.root, "doctor", "--json").stdout)
    (finding,) = [f for f in report["findings"] if f["code"] == "merge_unfinished"]
    assert finding["severity"] == "warning" and finding["goal_id"] == "g1"
    assert "loopx goal merge g1" in finding["repair"] and "--abort" in finding["repair"]
    proc = loopx(cli.root, "recover", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["merges"] == ["g1"]
    report = json.loads(loopx_here(cli.root, "doctor", "--json").stdout)
    assert [f for f in report["findings"] if f["code"] == "merge_unfinished"] == []


def test_the_journal_dates_each_step_and_records_each_git_run(cli: Cli, tmp_path: Path) -> None:
    """Every git command that changes something is a run with its pid; every step a mark."""
    repo = repo_with_ignored_env(tmp_path / "repo")
    done_goal(cli.root, repo)
    code, journal, err = merge(cli.root)
    assert code == 0 and journal is not None, err
    assert [m["step"] for m in journal["marks"]] == [
        "planned", "merged", "checked", "moved", "synced", "finished",
    ]  # fmt: skip
    actions = [r["action"] for r in journal["runs"]]
    assert actions[:3] == ["scratch_add", "merge", "move"] and "scratch_remove" in actions
    assert all(r["pid"] and r["started"] and r["exit_code"] == 0 for r in journal["runs"])
    times = [r["started_at"] for r in journal["runs"]]
    assert times == sorted(times)


def test_recover_cancels_a_merge_git_refuses_to_finish_and_exits_0(
    cli: Cli, tmp_path: Path
) -> None:
    """A killed merge whose branch commit git no longer has: recover aborts it, base unchanged."""
    repo = repo_with_ignored_env(tmp_path / "repo")
    done_goal(cli.root, repo)
    old = head(repo)
    assert merge(cli.root, LOOPX_FAULT="merge:planned")[0] == exitcodes.FAULT
    path = cli.root / "goals" / "g1" / "merge.json"
    journal = json.loads(path.read_text())
    path.write_text(json.dumps({**journal, "branch_head": "0" * 39 + "1"}))  # gone from the repo
    proc = loopx(cli.root, "recover", "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["merges"] == [] and [m.split(":")[0] for m in report["merges_cancelled"]] == [
        "g1"
    ]
    journal = json.loads(path.read_text())
    assert (journal["step"], journal["outcome"], head(repo)) == ("aborted", "aborted", old)
    assert _scratch_gone(cli.root, repo)
    assert loopx(cli.root, "recover").returncode == 0


def test_a_git_refused_by_a_lock_left_after_the_settle_is_settled_and_run_once_more(
    tmp_path: Path,
) -> None:
    """A ref lock a killed merge's surviving git took late: no live holder, so removed and retried."""
    repo = make_repo(tmp_path / "repo", {"a.txt": "one\n"})
    old = git(repo, "rev-parse", "HEAD")
    new = commit_file(repo, "a.txt", "two\n")
    git(repo, "update-ref", "refs/heads/main", old)
    lock = repo / ".git" / "refs" / "heads" / "main.lock"
    lock.write_text(new + "\n")  # left by a git that is gone
    now = utcnow()
    journal = MergeJournal(
        goal_id="g1", repo=str(repo), base="main", branch="loopx/g1", mode=MergeMode.MERGE,
        base_old=old, branch_head=new, scratch=str(tmp_path / "scratch"), created_at=now,
        updated_at=now,
    )  # fmt: skip
    root = tmp_path / "root"
    layout = open_root(ResolvedRoot(root, root / "registry.json", RootSource.FLAG), create=True)
    layout.ensure_goal_dirs("g1")
    run = MergeRun(layout, journal)
    done = run.git("move", repo, "update-ref", "refs/heads/main", new, old)
    assert done.returncode == 0
    assert git(repo, "rev-parse", "main") == new and not lock.exists()
    assert [(r.action, r.exit_code != 0) for r in run.journal.runs] == [
        ("move", True),
        ("move", False),
    ]
