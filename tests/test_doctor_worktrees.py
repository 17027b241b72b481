"""`loopx doctor` on worktree goals: the worktree's files are git's, its registration is checked.

A worktree's files are not held to the root's 0600 rule (one warning per
file, and a `chmod 600` repair that made the worktree dirty for `goal
merge`); instead doctor checks that each goal's worktree is registered with
git, on its branch, and not locked by a git process that is gone, and
`doctor --repair` never changes a tracked file.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from loopx import exitcodes
from loopx.testing.gitwork import git, make_repo
from loopx.worktree.gitlocks import admin_dir, lock_reason_pid
from tests.conftest import Cli
from tests.gitkit import add_goal, run_turn
from tests.turnkit import loopx_here

pytestmark = pytest.mark.timeout(240)

GOALS = ("g1", "g2")
SCRIPT = "tools/run.sh"  # tracked with its executable bit: `chmod 600` would be a change


def _repo(path: Path) -> Path:
    """A repository of 300 files in nested folders (mode 0644, one script 0755)."""
    files = {f"pkg{i % 10}/sub{i % 3}/file{i}.txt": f"line {i}\n" for i in range(299)}
    files[SCRIPT] = "#!/bin/sh\necho run\n"
    make_repo(path, files)
    (path / SCRIPT).chmod(0o755)
    git(path, "add", SCRIPT)
    git(path, "commit", "-q", "-m", "the script runs")
    return path


@pytest.fixture
def worktree_root(cli: Cli, tmp_path: Path) -> tuple[Path, Path]:
    """A root with two worktree goals that each committed a turn in their worktree; the repo."""
    old = os.umask(0o022)  # git makes the worktrees' files as a user's checkout has them
    try:
        repo = _repo(tmp_path / "repo")
        for goal_id in GOALS:
            assert add_goal(cli.root, goal_id, repo).returncode == 0
            proc = run_turn(cli.root, goal_id)
            assert proc.returncode == 0, proc.stderr
    finally:
        os.umask(old)
    return cli.root, repo


def _worktree(root: Path, goal_id: str) -> Path:
    return root / "worktrees" / goal_id


def _doctor(root: Path, *args: str) -> tuple[int, dict[str, Any]]:
    """`loopx doctor --json [args]`: exit code and report."""
    proc = loopx_here(root, "doctor", "--json", *args)
    lines = proc.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("{"))
    return proc.returncode, json.loads("\n".join(lines[start:]))


def _findings(report: dict[str, Any], code: str) -> list[dict[str, Any]]:
    return [f for f in report["findings"] if f["code"] == code]


def _clean(root: Path) -> dict[str, str]:
    """`git status --porcelain` of every goal's worktree (empty: clean)."""
    return {g: git(_worktree(root, g), "status", "--porcelain") for g in GOALS}


def _run_repair(finding: dict[str, Any]) -> None:
    """Run a finding's repair command as a person would (without its explanation)."""
    command = finding["repair"].split("  (", 1)[0]
    subprocess.run(["sh", "-c", command], check=True, capture_output=True)


def test_doctor_is_healthy_on_a_root_with_worktree_goals(worktree_root: tuple[Path, Path]) -> None:
    """Given 300 files per worktree with a user's modes, doctor exits 0 and names none of them."""
    root, _repo_path = worktree_root
    assert stat.S_IMODE((_worktree(root, "g1") / "pkg0" / "sub0" / "file0.txt").stat().st_mode) == (
        0o644
    )
    code, report = _doctor(root)
    assert (code, report["healthy"]) == (exitcodes.OK, True), report["findings"]
    inside = [f for f in report["findings"] if f["path"].startswith(str(root / "worktrees") + "/")]
    assert inside == []
    assert report["files_checked"] < 300  # the worktrees' files are git's, not walked


def test_doctor_repair_leaves_every_worktree_clean(worktree_root: tuple[Path, Path]) -> None:
    """`doctor --repair` changes no tracked file: git status stays empty, the script stays 0755."""
    root, _repo_path = worktree_root
    code, report = _doctor(root, "--repair")
    assert code == exitcodes.OK, report["findings"]
    assert _clean(root) == dict.fromkeys(GOALS, "")
    script = _worktree(root, "g1") / SCRIPT
    assert stat.S_IMODE(script.stat().st_mode) == 0o755


def test_a_worktree_whose_registration_was_removed_is_reported_and_its_repair_works(
    worktree_root: tuple[Path, Path],
) -> None:
    """Given g1's entry removed from the repository's .git/worktrees, doctor names it and the
    command it prints registers the folder again, its uncommitted change kept."""
    root, repo = worktree_root
    work = _worktree(root, "g1")
    (work / "pkg0" / "sub0" / "file0.txt").write_text("edited, not committed\n")
    gitdir = admin_dir(work)
    assert gitdir is not None
    subprocess.run(["rm", "-rf", str(gitdir)], check=True)
    code, report = _doctor(root)
    found = _findings(report, "worktree_unregistered")
    assert (code, [(f["goal_id"], f["path"]) for f in found]) == (
        exitcodes.FAILURE,
        [("g1", str(work))],
    )
    _run_repair(found[0])
    assert _doctor(root)[0] == exitcodes.OK
    assert git(work, "status", "--porcelain") == "M pkg0/sub0/file0.txt"
    assert git(work, "rev-parse", "--abbrev-ref", "HEAD") == "loopx/g1"
    assert str(work) in git(repo, "worktree", "list", "--porcelain")


@pytest.mark.parametrize("how", [("switch", "-q", "-c", "other"), ("checkout", "-q", "--detach")])
def test_a_worktree_on_the_wrong_branch_is_reported(
    worktree_root: tuple[Path, Path], how: tuple[str, ...]
) -> None:
    """Given g2's worktree on another branch (or detached), doctor names it; its repair works."""
    root, _repo_path = worktree_root
    git(_worktree(root, "g2"), *how)
    code, report = _doctor(root)
    found = _findings(report, "worktree_wrong_branch")
    assert (code, [f["goal_id"] for f in found]) == (exitcodes.FAILURE, ["g2"])
    _run_repair(found[0])
    assert _doctor(root)[0] == exitcodes.OK


def _locks(repo: Path) -> list[str]:
    """The ``locked`` lines of `git worktree list --porcelain`."""
    listed = git(repo, "worktree", "list", "--porcelain").splitlines()
    return [line for line in listed if line.startswith("locked")]


def _dead_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_worktree_locked_by_a_dead_pid_is_reported_and_repair_unlocks_it(
    worktree_root: tuple[Path, Path],
) -> None:
    """Given g1 locked with a reason naming a pid that is gone, doctor warns; --repair unlocks."""
    root, repo = worktree_root
    work = _worktree(root, "g1")
    pid = _dead_pid()
    git(repo, "worktree", "lock", "--reason", f"held by loopx pid {pid}", str(work))
    code, report = _doctor(root)
    found = _findings(report, "worktree_locked")
    assert (code, [(f["goal_id"], f["severity"]) for f in found]) == (
        exitcodes.FAILURE,
        [("g1", "warning")],
    )
    assert f"pid {pid}" in found[0]["problem"]
    assert _doctor(root, "--repair")[0] == exitcodes.OK
    assert _locks(repo) == []
    assert _clean(root) == dict.fromkeys(GOALS, "")


def _leave_killed_add(work: Path) -> tuple[Path, Path]:
    """What a `git worktree add` killed mid-checkout leaves: its 'initializing' lock, index.lock."""
    gitdir = admin_dir(work)
    assert gitdir is not None
    locked, index = gitdir / "locked", gitdir / "index.lock"
    locked.write_text("initializing\n")
    index.write_bytes(b"")
    for path in (locked, index):
        os.utime(path, (path.stat().st_atime - 60, path.stat().st_mtime - 60))
    return locked, index


def test_locks_of_a_killed_git_worktree_add_are_reported_and_repaired(
    worktree_root: tuple[Path, Path],
) -> None:
    """Given the lock and index.lock of a git that is gone, doctor names both; --repair removes
    both and nothing tracked changes."""
    root, _repo_path = worktree_root
    locked, index = _leave_killed_add(_worktree(root, "g2"))
    code, report = _doctor(root)
    found = sorted(f["path"] for f in _findings(report, "worktree_locked"))
    assert (code, found) == (exitcodes.FAILURE, sorted([str(locked), str(index)]))
    assert _doctor(root, "--repair")[0] == exitcodes.OK
    assert (locked.exists(), index.exists()) == (False, False)
    assert _clean(root) == dict.fromkeys(GOALS, "")


def test_a_lock_while_a_git_process_works_in_the_repository_is_left_alone(
    worktree_root: tuple[Path, Path],
) -> None:
    """Given a live git process in the repository, its locks are neither reported nor removed."""
    root, repo = worktree_root
    locked, index = _leave_killed_add(_worktree(root, "g2"))
    live = subprocess.Popen(
        ["git", "-C", str(repo), "hash-object", "--stdin"],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
    )
    try:
        code, report = _doctor(root, "--repair")
        assert (code, _findings(report, "worktree_locked")) == (exitcodes.OK, [])
        assert (locked.exists(), index.exists()) == (True, True)
    finally:
        live.kill()
        live.communicate()


def test_a_persons_lock_is_information_only(worktree_root: tuple[Path, Path]) -> None:
    """Given `git worktree lock --reason` with no pid, doctor stays healthy and says so (info)."""
    root, repo = worktree_root
    git(repo, "worktree", "lock", "--reason", "on a removable disk", str(_worktree(root, "g1")))
    code, report = _doctor(root, "--repair")
    found = _findings(report, "worktree_locked")
    assert (code, [f["severity"] for f in found]) == (exitcodes.OK, ["info"])
    assert _locks(repo) == ["locked on a removable disk"]  # repair kept it


@pytest.mark.parametrize(
    ("reason", "pid"),
    [("held by pid 42", 42), ("loopx pid=7 turn x", 7), ("initializing", None), ("", None)],
)
def test_lock_reason_pid(reason: str, pid: int | None) -> None:
    """Pure: the pid a lock's reason names."""
    assert lock_reason_pid(reason) == pid
