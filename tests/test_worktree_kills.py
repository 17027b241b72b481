"""A kill inside `git worktree add` never wedges a goal: the next claim finishes what git left.

A goal's first claim on a repository of 3,000 files is killed while its
`git worktree add` runs: the git process itself (a child of the claiming
`loopx turn run-once`, found with psutil), the loopx process alone (its git
runs on), or both by process group. Then the same command again and
`loopx recover`: the goal's turn ran in a worktree on `loopx/<id>` made from
the recorded base commit with the base's files, `git fsck` is clean, no
commit is lost, and no gate was opened. A lock a live foreign process holds
opens one gate naming the lock, however often the goal is claimed.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

from loopx import exitcodes
from loopx.testing.gitwork import git
from loopx.worktree.gitlocks import admin_dir
from tests.fleet_helpers import alive, wait_for
from tests.gitkit import add_goal, goal_doc, head, run_turn
from tests.turnkit import cli_env, loopx, loopx_here

pytestmark = pytest.mark.timeout(240)

FILES = 3000
MODES = ("git", "loopx", "group")


def _big_repo(path: Path, files: int = FILES) -> Path:
    """A repository on ``main`` of ``files`` small files in nested folders, made by one
    `git fast-import` (no file written twice) and checked out."""
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    lines = ["commit refs/heads/main", "committer Test <test@example.invalid> 0 +0000",
             "data 7", "initial"]  # fmt: skip
    for i in range(files):
        text = f"line {i}\n"
        lines += [f"M 100644 inline pkg{i % 30}/mod{i % 7}/file{i}.txt", f"data {len(text)}", text]
    subprocess.run(["git", "-C", str(path), "fast-import", "--quiet"], input="\n".join(lines) + "\n",
                   text=True, check=True, capture_output=True)  # fmt: skip
    git(path, "reset", "-q", "--hard")
    return path


def _git_add_of(proc: psutil.Process) -> psutil.Process | None:
    """The `git worktree add` among ``proc``'s descendants, if it runs now."""
    try:
        children = proc.children(recursive=True)
    except psutil.Error:
        return None
    for child in children:
        try:
            line = child.cmdline()
        except psutil.Error:
            continue
        if "worktree" in line and "add" in line:
            return child
    return None


@dataclass(frozen=True, slots=True)
class Kill:
    """What one kill hit."""

    mode: str
    hit: bool  # the git was still running when the signal went
    locks: tuple[str, ...]  # lock files the kill left in the worktree's git directory


def _kill_inside_git_add(root: Path, goal_id: str, mode: str, rng: random.Random) -> Kill:
    """Start the goal's first claim, SIGKILL it (``mode``) at a random point of its git add."""
    claim = subprocess.Popen(
        [sys.executable, "-m", "loopx", "--root", str(root), "turn", "run-once", goal_id],
        env=cli_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its own process group, which its git inherits
    )
    try:
        me = psutil.Process(claim.pid)
        add = wait_for("the claim's git worktree add", lambda: _git_add_of(me), timeout=60,
                       every=0.005)  # fmt: skip
        time.sleep(rng.uniform(0.0, 0.25))
        hit = alive(add)
        with contextlib.suppress(psutil.NoSuchProcess, ProcessLookupError):  # ended meanwhile
            if mode == "git":
                add.kill()
            elif mode == "loopx":
                claim.kill()
            else:
                os.killpg(claim.pid, signal.SIGKILL)
        claim.wait(timeout=120)
    finally:
        if claim.poll() is None:
            claim.kill()
            claim.wait()
    gitdir = admin_dir(root / "worktrees" / goal_id)
    locks = (
        tuple(sorted(p.name for p in gitdir.iterdir() if p.name.endswith(("lock", "locked"))))
        if gitdir is not None and gitdir.is_dir()
        else ()
    )
    return Kill(mode, hit, locks)


def _first_after(repo: Path, base: str, branch: str) -> str:
    """The first commit of ``branch`` after ``base``."""
    return git(repo, "rev-list", "--reverse", f"{base}..{branch}").split()[0]


def _converged(root: Path, repo: Path, goal_id: str, base: str) -> tuple[Any, ...]:
    """What an undisturbed first claim leaves, in terms a kill must not change."""
    work = root / "worktrees" / goal_id
    branch = f"loopx/{goal_id}"
    record = json.loads((root / "goals" / goal_id / "worktree.json").read_text())
    state = goal_doc(root, goal_id)["state"]
    return (
        record["phase"],
        record["base_commit"] == base,
        git(work, "rev-parse", "--abbrev-ref", "HEAD") == branch,
        # The branch grew from the base (a host the kill cut short commits again when retried).
        git(repo, "rev-parse", f"{_first_after(repo, base, branch)}^") == base,
        git(repo, "diff", "--name-only", base, branch),  # the base's files + the host's
        git(work, "status", "--porcelain"),
        git(work, "log", "-1", "--format=%s"),
        [g for g in state["gates"] if g["answer"] is None],
        not (root / "goals" / goal_id / "worktree-git.json").exists(),
    )


def _expected(goal_id: str) -> tuple[Any, ...]:
    return ("ready", True, True, True, "notes.txt", "", f"{goal_id}: turn 1", [], True)


def _kill_and_recover(root: Path, repo: Path, goal_id: str, mode: str, rng: random.Random) -> Kill:
    """One kill inside the goal's git worktree add, the claim again and `loopx recover`."""
    base = head(repo)
    assert add_goal(root, goal_id, repo).returncode == 0
    kill = _kill_inside_git_add(root, goal_id, mode, rng)  # a git may run on: the claim waits
    if goal_doc(root, goal_id)["goal"]["status"] != "done":  # a killed git is run again at once
        again = run_turn(root, goal_id)
        # The claim may recover the killed turn itself (its host had ended): then the goal is
        # done and there is no turn left to run.
        finished = goal_doc(root, goal_id)["goal"]["status"] == "done"
        assert again.returncode == 0 or (finished and again.returncode == 3), (
            kill,
            again.stdout + again.stderr,
        )
    recovered = loopx(root, "recover", timeout=120)
    assert recovered.returncode == 0, recovered.stdout + recovered.stderr
    assert _converged(root, repo, goal_id, base) == _expected(goal_id), kill
    assert head(repo) == base  # nothing committed on the base, nothing lost
    fsck = subprocess.run(["git", "-C", str(repo), "fsck", "--no-progress"], capture_output=True,
                          text=True, check=False)  # fmt: skip
    assert fsck.returncode == 0, fsck.stdout + fsck.stderr
    return kill


@pytest.mark.parametrize(("seed", "mode"), list(enumerate(MODES)))
def test_a_kill_inside_git_worktree_add_converges_to_the_undisturbed_worktree(
    tmp_path: Path, seed: int, mode: str
) -> None:
    """Killed (git, loopx, or both) inside `git worktree add`: the next claim makes it right."""
    root, repo = tmp_path / "root", _big_repo(tmp_path / "repo")
    assert loopx_here(root, "init").returncode == 0
    _kill_and_recover(root, repo, "g1", mode, random.Random(seed))


@pytest.mark.soak
@pytest.mark.timeout(400)
def test_fifty_kills_inside_git_worktree_add_never_wedge_a_goal(
    tmp_path: Path,
) -> None:
    """50 kills at random points (each mode in turn) within 3 minutes: every goal converges."""
    rng = random.Random(42)
    root, repo = tmp_path / "root", _big_repo(tmp_path / "repo")
    assert loopx_here(root, "init").returncode == 0
    kills: list[Kill] = []
    deadline = time.monotonic() + 180
    while len(kills) < 50 and time.monotonic() < deadline:
        mode = MODES[len(kills) % len(MODES)]
        kills.append(_kill_and_recover(root, repo, f"s{len(kills)}", mode, rng))
    figures = Counter((k.mode, k.hit, bool(k.locks)) for k in kills)
    print(f"{len(kills)} kills (mode, inside git, locks left): {sorted(figures.items())}")
    assert len(kills) >= 20
    assert any(k.locks for k in kills)  # the kills did leave git's locks behind


def _plant_killed_add(root: Path, goal_id: str) -> tuple[Path, Path]:
    """What a `git worktree add` killed mid-checkout leaves: its 'initializing' lock, index.lock."""
    gitdir = admin_dir(root / "worktrees" / goal_id)
    assert gitdir is not None
    locked, index = gitdir / "locked", gitdir / "index.lock"
    locked.write_text("initializing\n")
    index.write_bytes(b"")
    for path in (locked, index):
        os.utime(path, (path.stat().st_atime - 60, path.stat().st_mtime - 60))
    return locked, index


def _killed_after_add(tmp_path: Path) -> tuple[Path, Path]:
    """A root whose goal g1 was killed right after its worktree's git add, with git's locks left."""
    root, repo = tmp_path / "root", _big_repo(tmp_path / "repo")
    assert loopx_here(root, "init").returncode == 0
    assert add_goal(root, "g1", repo).returncode == 0
    killed = run_turn(root, "g1", LOOPX_FAULT="worktree:add")
    assert killed.returncode == exitcodes.FAULT, killed.stderr
    return root, repo


def test_locks_of_a_dead_git_are_removed_and_the_turn_runs(tmp_path: Path) -> None:
    """Given git's locks and no process holding the repository, the claim clears them: no gate."""
    root, repo = _killed_after_add(tmp_path)
    locked, index = _plant_killed_add(root, "g1")
    assert run_turn(root, "g1").returncode == 0
    assert (locked.exists(), index.exists()) == (False, False)
    assert _converged(root, repo, "g1", head(repo)) == _expected("g1")


def test_a_lock_a_live_process_holds_opens_one_gate_naming_it(
    tmp_path: Path,
) -> None:
    """A foreign process with the index.lock open: one gate names the file, at every claim;
    once it is gone, the next claim clears the locks and the turn runs."""
    root, _repo = _killed_after_add(tmp_path)
    _locked, index = _plant_killed_add(root, "g1")
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; f = open(sys.argv[1]); time.sleep(600)",
         str(index)],
    )  # fmt: skip
    try:
        wait_for("the holder to open the lock", lambda: any(
            f.path == str(index) for f in psutil.Process(holder.pid).open_files()))  # fmt: skip
        for _ in range(2):
            proc = run_turn(root, "g1")
            assert proc.returncode != exitcodes.FAULT, proc.stderr
        gates = [g for g in goal_doc(root, "g1")["state"]["gates"] if g["answer"] is None]
        assert len(gates) == 1, gates
        assert str(index) in gates[0]["question"] and f"pid {holder.pid}" in gates[0]["question"]
        assert "loopx gate resolve g1 --answer" in gates[0]["question"]  # the command that works
        assert index.exists()  # held: never removed
    finally:
        holder.kill()
        holder.wait()
    assert (
        loopx_here(root, "gate", "resolve", "g1", "--answer", "the holder is gone").returncode == 0
    )
    assert run_turn(root, "g1").returncode == 0
    assert not index.exists()
    state = goal_doc(root, "g1")["state"]
    assert [g for g in state["gates"] if g["answer"] is None] == []
    assert git(root / "worktrees" / "g1", "log", "-1", "--format=%s") == "g1: turn 1"


def test_a_git_that_outlived_its_claim_is_waited_for(tmp_path: Path) -> None:
    """The claim killed at once after its git started: the next claim waits for that git (its
    recorded pid and start time), then finishes; no gate."""
    root, repo = tmp_path / "root", _big_repo(tmp_path / "repo")
    assert loopx_here(root, "init").returncode == 0
    assert add_goal(root, "g1", repo).returncode == 0
    killed = run_turn(root, "g1", LOOPX_FAULT="worktree:git_started")
    assert killed.returncode == exitcodes.FAULT, killed.stderr
    record = json.loads((root / "goals" / "g1" / "worktree-git.json").read_text())
    assert record["argv"][:2] == ["worktree", "add"] and record["pid"] > 0
    assert run_turn(root, "g1").returncode == 0
    assert _converged(root, repo, "g1", head(repo)) == _expected("g1")
