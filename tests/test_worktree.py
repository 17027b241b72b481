"""A git worktree per goal, made crash-safely on its first claim."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loopx import exitcodes
from loopx.testing.gitwork import commit_file, git, make_repo
from tests.conftest import Cli
from tests.fleet_helpers import supervisor, wait_for
from tests.gitkit import (
    add_goal,
    goal_doc,
    head,
    repo_with_ignored_env,
    run_turn,
    tree,
    worktree,
    worktree_paths,
)
from tests.turnkit import loopx_here

pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def cli_root(cli: Cli) -> Path:
    """An initialised root."""
    return cli.root


def test_first_claim_makes_the_worktree_and_the_turn_runs_and_commits_there(
    cli_root: Path, tmp_path: Path
) -> None:
    """The envelope's workdir and the host's cwd are the worktree; only loopx/<id> moves."""
    repo = repo_with_ignored_env(tmp_path / "repo")
    before = head(repo)
    assert add_goal(cli_root, "g1", repo, "--worktree-include", ".env").returncode == 0
    assert goal_doc(cli_root, "g1")["goal"]["worktree"]["base"] == "main"  # recorded at add
    assert worktree(cli_root, "g1")["phase"] is None  # nothing made before the first claim

    proc = run_turn(cli_root, "g1")
    assert proc.returncode == 0, proc.stderr

    view = worktree(cli_root, "g1")
    path = Path(view["path"])
    assert path == cli_root / "worktrees" / "g1"
    assert (view["phase"], view["exists"], view["ahead"], view["dirty"]) == (
        "ready",
        True,
        1,
        False,
    )
    assert (path / "notes.txt").read_text() == "g1 turn 1\n"
    assert (path / ".env").read_text() == "TOKEN=local\n"  # copied, not tracked
    assert head(repo) == before and not (repo / "notes.txt").exists()
    assert git(repo, "log", "-1", "--format=%s", "loopx/g1") == "g1: turn 1"
    journal = json.loads(next((cli_root / "goals" / "g1" / "turns").glob("*.json")).read_text())
    assert journal["plan"]["envelope"]["workdir"] == str(path)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "is not a git repository"),
        (("--base", "nope"), "--base nope: no such branch"),
    ],
)
def test_bad_worktree_input_is_one_line_exit_2_and_nothing_registered(
    cli_root: Path, tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    """Not a repository, or a base that is not a branch: refused at `goal add`."""
    where = tmp_path / "plain"
    where.mkdir()
    if args:
        make_repo(where)
    proc = add_goal(cli_root, "g1", where, *args)
    assert proc.returncode == exitcodes.USAGE
    assert message in proc.stderr and "hint:" in proc.stderr and "Traceback" not in proc.stderr
    assert not (cli_root / "goals" / "g1").exists()


def test_a_folder_inside_a_repository_and_options_without_worktree_are_refused(
    cli_root: Path, tmp_path: Path
) -> None:
    """--worktree wants the repository's top; --base alone wants --worktree."""
    repo = make_repo(tmp_path / "repo", {"sub/a.txt": "a\n"})
    inside = add_goal(cli_root, "g1", repo / "sub")
    assert inside.returncode == exitcodes.USAGE and f"--workdir {repo}" in inside.stderr
    plain = loopx_here(cli_root, "goal", "add", "g2", "--objective", "x", "--workdir", str(repo),
                       "--host-kind", "demo", "--base", "main")  # fmt: skip
    assert plain.returncode == exitcodes.USAGE and "go with --worktree" in plain.stderr
    assert not (cli_root / "goals" / "g1").exists() and not (cli_root / "goals" / "g2").exists()


def test_remove_refuses_uncommitted_changes_and_unmerged_commits(
    cli_root: Path, tmp_path: Path
) -> None:
    """`goal worktree --remove` keeps work that is nowhere else, and says why."""
    repo = repo_with_ignored_env(tmp_path / "repo")
    add_goal(cli_root, "g1", repo, "--worktree-include", ".env")
    assert run_turn(cli_root, "g1").returncode == 0
    path = Path(worktree(cli_root, "g1")["path"])

    unmerged = loopx_here(cli_root, "goal", "worktree", "g1", "--remove")
    assert unmerged.returncode == exitcodes.USAGE
    assert "1 commit(s) not in main" in unmerged.stderr
    (path / "draft.txt").write_text("not committed\n")
    dirty = loopx_here(cli_root, "goal", "worktree", "g1", "--remove")
    assert dirty.returncode == exitcodes.USAGE and "uncommitted changes (draft.txt)" in dirty.stderr
    assert path.is_dir() and (path / "draft.txt").exists()

    (path / "draft.txt").unlink()
    git(repo, "merge", "-q", "--ff-only", "loopx/g1")  # the branch's work is now in main
    removed = loopx_here(cli_root, "goal", "worktree", "g1", "--remove", "--json")
    assert removed.returncode == 0, removed.stderr
    assert json.loads(removed.stdout)["removed"] is True
    assert not path.exists() and worktree_paths(repo) == [str(repo)]


def test_done_and_archive_leave_the_worktree_in_place(cli_root: Path, tmp_path: Path) -> None:
    """Only `--remove` removes a worktree; finishing or archiving the goal does not."""
    repo = repo_with_ignored_env(tmp_path / "repo")
    add_goal(cli_root, "g1", repo)
    assert run_turn(cli_root, "g1").returncode == 0  # one turn: completed, done
    path = Path(worktree(cli_root, "g1")["path"])
    assert loopx_here(cli_root, "archive", "g1").returncode == 0
    assert path.is_dir() and str(path) in worktree_paths(repo)


def _settled(root: Path, repo: Path) -> tuple[object, ...]:
    """What a finished creation leaves: worktrees, the branch's tree, the files, the record."""
    path = root / "worktrees" / "g1"
    record = json.loads((root / "goals" / "g1" / "worktree.json").read_text())
    files = sorted(str(p.relative_to(path)) for p in path.rglob("*") if ".git" not in p.parts)
    return (
        [p.replace(str(root.parent), "HERE") for p in worktree_paths(repo)],
        git(repo, "branch", "--list", "loopx/*"),
        git(repo, "log", "--format=%s", "loopx/g1"),
        tree(repo, "loopx/g1"),
        files,
        record["phase"],
        record["branch"],
    )


@pytest.mark.parametrize(
    "point", ["worktree:intent", "worktree:add", "worktree:include", "worktree:ready"]
)
def test_killed_while_making_the_worktree_the_next_claim_finishes_it(
    tmp_path: Path, point: str
) -> None:
    """Kill at each step of the making, claim again: the files equal an undisturbed run's."""
    results = []
    for name, fault in (("calm", None), ("crashed", point)):
        root, repo = tmp_path / name / "root", repo_with_ignored_env(tmp_path / name / "repo")
        assert loopx_here(root, "init").returncode == 0
        add_goal(root, "g1", repo, "--worktree-include", ".env", turns=2)
        if fault is not None:
            killed = run_turn(root, "g1", LOOPX_FAULT=fault)
            assert killed.returncode == exitcodes.FAULT, killed.stderr
        proc = run_turn(root, "g1")
        assert proc.returncode == 0, proc.stderr
        results.append(_settled(root, repo))
    assert results[0] == results[1]


def test_two_worktree_goals_of_one_repository_run_at_once_each_on_its_own_branch(
    cli_root: Path, tmp_path: Path
) -> None:
    """A 2-agent fleet: overlapping turns, each in its worktree, each committing on loopx/<id>."""
    repo = repo_with_ignored_env(tmp_path / "repo")
    log = tmp_path / "turns"
    log.mkdir()
    for goal_id in ("a", "b"):
        assert add_goal(cli_root, goal_id, repo, turns=2, hold_s=1.5, log=log).returncode == 0
    main_before = head(repo)
    with supervisor(cli_root, agents=2):
        wait_for(
            "both goals done",
            lambda: all(goal_doc(cli_root, g)["goal"]["status"] == "done" for g in ("a", "b")),
            timeout=180,
        )
    turns = {
        g: [json.loads(line) for line in (log / f"{g}.jsonl").read_text().splitlines()]
        for g in ("a", "b")
    }
    for goal_id, runs in turns.items():
        assert {r["cwd"] for r in runs} == {str(cli_root / "worktrees" / goal_id)}
        assert {r["branch"] for r in runs} == {f"loopx/{goal_id}"}
        subjects = git(repo, "log", "--format=%s", f"main..loopx/{goal_id}").splitlines()
        assert subjects == [f"{goal_id}: turn 2", f"{goal_id}: turn 1"]
    overlap = max(
        min(x["end"], y["end"]) - max(x["start"], y["start"])
        for x in turns["a"]
        for y in turns["b"]
    )
    assert overlap > 0.5  # the two goals' turns ran at the same time
    assert head(repo) == main_before  # neither committed on the base


def test_worktree_dir_puts_the_worktree_where_asked(cli_root: Path, tmp_path: Path) -> None:
    """`--worktree-dir DIR` makes it at DIR/<id>."""
    repo = repo_with_ignored_env(tmp_path / "repo")
    add_goal(cli_root, "g1", repo, "--worktree-dir", str(tmp_path / "trees"))
    assert run_turn(cli_root, "g1").returncode == 0
    assert worktree(cli_root, "g1")["path"] == str(tmp_path / "trees" / "g1")
    commit_file(repo, "other.txt", "x\n")
    assert worktree(cli_root, "g1")["behind"] == 1


def test_batch_plans_and_import_files_carry_the_worktree_fields(
    cli_root: Path, tmp_path: Path
) -> None:
    """A plan's `worktree` records its base; an import line on a non-repository is refused."""
    repo = repo_with_ignored_env(tmp_path / "repo")
    plan = tmp_path / "plan.json"
    entry = {"id": "p1", "objective": "x", "workdir": "repo", "host_kind": "demo",
             "worktree": True, "worktree_include": [".env"], "auto_merge": True}  # fmt: skip
    plan.write_text(json.dumps({"goals": [entry]}))
    assert loopx_here(cli_root, "goal", "import", str(plan)).returncode == 0
    goal = goal_doc(cli_root, "p1")["goal"]
    assert goal["worktree"] == {"base": "main", "include": [".env"], "folder": None}
    assert goal["auto_merge"] is True

    listing = tmp_path / "goals.jsonl"
    line = {**goal, "id": "p2", "workdir": str(tmp_path)}
    listing.write_text(json.dumps(line) + "\n")
    refused = loopx_here(cli_root, "goal", "import", str(listing))
    assert refused.returncode == exitcodes.USAGE, refused.stderr
    assert "is not a git repository" in refused.stderr
    assert not (cli_root / "goals" / "p2").exists()
    assert repo.is_dir()


def test_a_worktree_that_cannot_be_made_opens_a_gate_and_runs_no_turn(
    cli_root: Path, tmp_path: Path
) -> None:
    """The repository is gone at the first claim: a gate says why; no host ran."""
    import shutil

    repo = repo_with_ignored_env(tmp_path / "repo")
    add_goal(cli_root, "g1", repo)
    shutil.rmtree(repo / ".git")
    proc = run_turn(cli_root, "g1")
    assert proc.returncode != exitcodes.FAULT, proc.stderr
    state = goal_doc(cli_root, "g1")["state"]
    (gate,) = [g for g in state["gates"] if g["answer"] is None]
    assert (
        "worktree could not be made" in gate["question"] and "no longer a git" in gate["question"]
    )
    assert not (cli_root / "goals" / "g1" / "turns").exists() or not any(
        (cli_root / "goals" / "g1" / "turns").glob("*.json")
    )
