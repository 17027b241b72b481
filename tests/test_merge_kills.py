"""Killed at random inside `loopx goal merge`, every merge still ends as an undisturbed one would.

Each trial adds a worktree goal to one repository (400 files; 2,000 under
``soak``), runs its
turn, then starts `loopx goal merge` in a mode chosen by the seed and kills,
at a random moment, the Python process alone, the git child it is running
(found with psutil) alone, or both together by process group; sometimes the
rerun is killed too (under ``soak`` three to six merges of each goal are
killed). Then the same command runs again and `loopx recover`
runs (in either order): both exit 0, the base's tree is what ``git
merge-tree`` says an undisturbed merge gives, its parents are the mode's, no
commit is lost, the scratch worktree is gone, the checkout is clean, and
``git fsck`` is clean. The default run is three seeds; ``soak`` kills 50 times
within a bounded budget.
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
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest

from loopx.testing.gitwork import git, make_repo
from tests.gitkit import add_goal, goal_doc, head, run_turn, tree, worktree_paths
from tests.turnkit import cli_env, loopx, loopx_here

pytestmark = pytest.mark.timeout(300)

MODES = ("merge", "squash", "ff")
VICTIMS = ("python", "git", "group")
FILES = 400  # enough for git to be killed inside a checkout; soak uses a few thousand
SOAK_FILES = 2000


@dataclass
class Tally:
    """What the kills did, over a run."""

    kills: Counter[str] = field(default_factory=Counter)  # victim -> kills that landed
    exits: Counter[int] = field(default_factory=Counter)  # exit codes of killed merges
    trials: int = 0


def big_repo(path: Path, count: int) -> Path:
    """A repository on ``main`` with ``count`` tracked files (and a README)."""
    files = {f"src/{i // 100:02}/f{i:04}.txt": f"line {i}\n" for i in range(count)}
    return make_repo(path, {"README": "hello\n", ".gitignore": ".env\n", **files})


def _git_child(proc: subprocess.Popen[str]) -> psutil.Process | None:
    try:
        kids = psutil.Process(proc.pid).children(recursive=True)
    except psutil.Error:
        return None
    for kid in kids:
        with contextlib.suppress(psutil.Error):  # a child may end between the listing and now
            if kid.name() == "git":
                return kid
    return None


def kill_at(proc: subprocess.Popen[str], victim: str, delay: float) -> bool:
    """Kill ``victim`` of a running merge ``delay`` seconds in; whether a kill landed."""
    deadline = time.monotonic() + delay
    while proc.poll() is None:
        if time.monotonic() < deadline:
            time.sleep(0.005)
            continue
        if victim == "python":
            proc.kill()
            return True
        if victim == "group":
            os.killpg(proc.pid, signal.SIGKILL)
            return True
        child = _git_child(proc)
        if child is not None:
            try:
                child.kill()
            except psutil.NoSuchProcess:
                continue
            return True
        time.sleep(0.002)
    return False


def start_merge(root: Path, goal_id: str, mode: str) -> subprocess.Popen[str]:
    """A real `loopx goal merge` in its own process group."""
    argv = [sys.executable, "-m", "loopx", "--root", str(root), "goal", "merge", goal_id,
            "--mode", mode, "--json"]  # fmt: skip
    return subprocess.Popen(
        argv,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=cli_env(),
        start_new_session=True,
        text=True,
    )


def expected_tree(repo: Path, base: str, branch: str, mode: str) -> str:
    """The tree an undisturbed merge of ``branch`` into ``base`` gives."""
    if mode == "ff":
        return tree(repo, branch)
    return git(repo, "merge-tree", "--write-tree", base, branch).splitlines()[0]


def trial(  # noqa: PLR0917 - the trial's inputs, read as one sentence at the two calls
    root: Path,
    repo: Path,
    goal_id: str,
    rng: random.Random,
    tally: Tally,
    attempts: tuple[int, ...] = (1, 1, 2),
) -> None:
    """One goal merged through random kills (``attempts``: how many); asserts it ends whole."""
    assert add_goal(root, goal_id, repo, file=f"{goal_id}.txt").returncode == 0
    assert run_turn(root, goal_id).returncode == 0
    mode = rng.choice(MODES)
    base, branch = head(repo), head(repo, f"loopx/{goal_id}")
    want = expected_tree(repo, base, branch, mode)
    for _ in range(rng.choice(attempts)):
        victim = rng.choice(VICTIMS)
        proc = start_merge(root, goal_id, mode)
        try:
            if kill_at(proc, victim, rng.uniform(0.05, 1.6)):
                tally.kills[victim] += 1
            tally.exits[proc.wait(timeout=120)] += 1
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    commands = [("goal", "merge", goal_id, "--mode", mode, "--json"), ("recover", "--json")]
    for args in commands if rng.random() < 0.5 else commands[::-1]:
        done = loopx(root, *args, timeout=120)
        assert done.returncode == 0, (goal_id, mode, args, done.stdout, done.stderr)
    journal = json.loads((root / "goals" / goal_id / "merge.json").read_text())
    assert (journal["step"], journal["outcome"]) == ("finished", "merged"), journal
    parents = git(repo, "rev-list", "--parents", "-n1", "main").split()[1:]
    assert (tree(repo), head(repo, f"loopx/{goal_id}")) == (want, branch)
    assert parents == {"merge": [base, branch], "squash": [base], "ff": parents}[mode]
    assert mode != "ff" or head(repo) == branch
    assert git(repo, "status", "--porcelain", "--untracked-files=no") == ""
    assert str(root / "worktrees" / ".merge" / goal_id) not in worktree_paths(repo)
    assert not (root / "worktrees" / ".merge" / goal_id).exists()
    doc = goal_doc(root, goal_id)
    assert doc["goal"]["status"] == "done"
    assert [g for g in doc["state"]["gates"] if g["answer"] is None] == []
    tally.trials += 1


def fsck_clean(repo: Path) -> None:
    """``git fsck`` finds nothing wrong (dangling objects of killed merges are not wrong)."""
    done = subprocess.run(
        ["git", "-C", str(repo), "fsck", "--no-dangling", "--no-progress"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0 and done.stdout.strip() == "", done.stdout + done.stderr


def _set_up(tmp_path: Path, files: int = FILES) -> tuple[Path, Path]:
    root, repo = tmp_path / "root", big_repo(tmp_path / "repo", files)
    (repo / ".env").write_text("TOKEN=local\n")
    assert loopx_here(root, "init").returncode == 0
    return root, repo


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_merge_killed_at_random_ends_merged_after_a_rerun_and_recover(
    tmp_path: Path, seed: int
) -> None:
    """One goal, one to two random kills, then the rerun and `loopx recover` end it."""
    root, repo = _set_up(tmp_path)
    trial(root, repo, "g1", random.Random(seed), Tally())
    fsck_clean(repo)


@pytest.mark.soak
@pytest.mark.timeout(400)
def test_fifty_kills_inside_merges_leave_no_merge_wedged(tmp_path: Path) -> None:
    """Goal after goal in one repository, until 50 kills landed or the budget is spent."""
    root, repo = _set_up(tmp_path, SOAK_FILES)
    rng, tally = random.Random(4242), Tally()
    budget = time.monotonic() + 180
    n = 0
    while sum(tally.kills.values()) < 50 and time.monotonic() < budget:
        n += 1
        trial(root, repo, f"g{n}", rng, tally, attempts=(3, 4, 5, 6))
    fsck_clean(repo)
    print(
        f"merge kills: {dict(tally.kills)}, exits {dict(tally.exits)}, {tally.trials} goals merged"
    )
    assert sum(tally.kills.values()) >= 20  # the budget allowed a meaningful number


def _git_killed_on(bin_dir: Path, words: str) -> Path:
    """A ``git`` first on PATH that SIGKILLs itself the first time its arguments hold ``words``."""
    real = subprocess.run(["sh", "-c", "command -v git"], capture_output=True, text=True,
                          check=True).stdout.strip()  # fmt: skip
    bin_dir.mkdir()
    wrapper = bin_dir / "git"
    wrapper.write_text(
        f'#!/bin/sh\ncase "$*" in *"{words}"*)\n'
        f"  [ -e {bin_dir}/killed ] || {{ : >{bin_dir}/killed; kill -9 $$; }} ;;\nesac\n"
        f'exec {real} "$@"\n'
    )
    wrapper.chmod(0o755)
    return bin_dir


def test_a_git_killed_while_a_finished_merge_is_rerun_fails_the_rerun_and_plans_nothing(
    tmp_path: Path,
) -> None:
    """The rerun asks git whether the branch is where the merge left it; a killed git is no
    answer (read as "no branch", it made a fresh plan that ended ``up_to_date``)."""
    root, repo = _set_up(tmp_path)
    assert add_goal(root, "g1", repo, file="g1.txt").returncode == 0
    assert run_turn(root, "g1").returncode == 0
    assert loopx(root, "goal", "merge", "g1", "--json").returncode == 0
    merged = json.loads((root / "goals" / "g1" / "merge.json").read_text())
    bin_dir = _git_killed_on(tmp_path / "bin", "refs/heads/loopx/g1^{commit}")
    path = f"{bin_dir}{os.pathsep}{os.environ['PATH']}"
    rerun = loopx(root, "goal", "merge", "g1", "--json", PATH=path)
    assert rerun.returncode != 0, rerun.stdout
    assert "killed by signal 9" in rerun.stderr
    assert json.loads((root / "goals" / "g1" / "merge.json").read_text()) == merged
    again = loopx(root, "goal", "merge", "g1", "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["outcome"] == "merged"
