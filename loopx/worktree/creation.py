"""Making a goal's worktree on its first claim, crash-safely.

The steps, each a fault point (``worktree:<step>``), and what the next claim
does after a kill right after it:

1. ``intent``: ``worktree.json`` is written ``intended`` with the path, the
   branch and the base's commit. Killed here: nothing else exists; redone.
2. ``add``: ``git worktree add`` makes branch ``loopx/<id>`` at that commit
   and checks it out at the recorded path. Each git command is recorded
   before it starts, with its pid and start time once it runs
   (:mod:`loopx.worktree.gitrun`). Killed inside or after it, the next claim
   first judges what the killed git left (:mod:`loopx.worktree.gitlocks`):
   while LoopX's recorded git or any process holding the repository is alive,
   the goal waits (:class:`WorktreeLockHeldError`, naming the lock); once
   they are gone, the locks (``locked`` "initializing", ``index.lock``, the
   branch's ref lock) are removed. Then a worktree registered on its branch
   is checked out again (``git reset --hard`` of a worktree no turn ever ran
   in), and anything else half-made (a folder git never registered, one
   registered on no branch yet, a registration whose folder is gone) is
   taken down and made again; an existing branch is reused, never made twice.
3. ``include``: the untracked files matching ``--worktree-include`` are copied
   from the repository (a copy again overwrites with the same bytes).
4. ``ready``: the record says ``ready``. From now on the worktree is the
   goal's, may hold work, and is never reset or removed by a claim.

A goal therefore never gets two worktrees: the path and the branch are fixed
by the goal id, and every step finds what an earlier attempt made; whatever
the kill, the result is the undisturbed run's (same branch, base commit, files).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from loopx import git
from loopx.errors import WorktreeError
from loopx.faults import fault_point
from loopx.git.holders import Holder
from loopx.log import get_logger
from loopx.model import utcnow
from loopx.registry.goalrecords import Goal
from loopx.registry.worktree_record import (
    WorktreePhase,
    WorktreeRecord,
    branch_of,
    read_record,
    worktree_path,
    write_record,
)
from loopx.root import Layout
from loopx.storage.dirs import ensure_dir
from loopx.turn.fencing import Fence
from loopx.worktree.gitlocks import (
    Processes,
    admin_dir,
    admin_dirs_naming,
    branch_lock,
    is_git,
    leftover_locks,
    own_git_alive,
    remove_locks,
)
from loopx.worktree.gitrun import forget_run, read_run, run_recorded

log = get_logger(__name__)


class WorktreeLockHeldError(WorktreeError):
    """A lock a git left in the goal's half-made worktree is held by a live process: wait."""

    def __init__(self, goal_id: str, lock: Path, holders: list[Holder]) -> None:
        named = "; ".join(h.describe() for h in holders[:3])
        super().__init__(
            f"goal {goal_id!r}: {lock} is held ({named}); LoopX removes it once no process "
            "holds the repository",
            hint="let that process end (or end it), then claim the goal again",
        )
        self.goal_id, self.lock, self.holders = goal_id, lock, holders

    @property
    def only_git(self) -> bool:
        """Whether every holder is a git program, which ends by itself."""
        return all(is_git(h) for h in self.holders)


def turn_goal(layout: Layout, goal: Goal, fence: Fence) -> Goal:
    """The goal as its turns see it: ``workdir`` is its worktree, made first if need be.

    A goal without ``--worktree`` is returned as it is, with no I/O.

    Raises:
        WorktreeError: the repository or its base branch is gone.
        GitError: git refused a step.
        LeaseLostError: the claim was taken over.
    """
    if goal.worktree is None:
        return goal
    record = ensure_worktree(layout, goal, fence)
    return goal.model_copy(update={"workdir": record.path})


def ensure_worktree(layout: Layout, goal: Goal, fence: Fence) -> WorktreeRecord:
    """The goal's worktree, made (or its making finished) now if it is not ready.

    Raises:
        WorktreeError: the goal has no worktree spec, its repository or base is gone, or
            its ready worktree was removed by hand.
        GitError: git refused a step.
        LeaseLostError: the claim was taken over.
    """
    spec = goal.worktree
    if spec is None:
        raise WorktreeError(f"goal {goal.id!r} has no worktree", hint="add it with --worktree")
    record = read_record(layout, goal.id)
    if record is not None and record.phase is WorktreePhase.READY:
        if not Path(record.path).is_dir():
            raise WorktreeError(
                f"goal {goal.id!r}: its worktree {record.path} is gone (removed outside LoopX)",
                hint=f"restore it (`git -C {record.repo} worktree add {record.path} "
                f"{record.branch}`) or remove the record with `loopx goal worktree {goal.id} "
                "--remove`",
            )
        return record
    repo = Path(goal.workdir)
    if record is None:
        record = _intend(layout, goal, repo, fence)
    fault_point("worktree:intent")
    clear_leftovers(layout, record)
    _add(layout, record, fence)
    fault_point("worktree:add")
    copy_included(repo, Path(record.path), spec.include)
    forget_run(layout, goal.id)  # made: no git of the making is left to judge
    fault_point("worktree:include")
    with fence.held():
        ready = record.model_copy(update={"phase": WorktreePhase.READY, "updated_at": utcnow()})
        write_record(layout, ready)
    fault_point("worktree:ready")
    log.info("worktree_created", path=ready.path, branch=ready.branch, base=ready.base)
    return ready


def _intend(layout: Layout, goal: Goal, repo: Path, fence: Fence) -> WorktreeRecord:
    spec = goal.worktree
    assert spec is not None  # noqa: S101 - checked by the caller
    top = git.toplevel(repo) if repo.is_dir() else None
    if top is None:
        raise WorktreeError(
            f"goal {goal.id!r}: its repository {repo} is no longer a git repository",
            hint="restore the repository, or register the goal again without --worktree",
        )
    branch = branch_of(goal.id)
    # An existing loopx/<id> (an earlier goal of that id, or a kill after `git worktree add`
    # made it) is the goal's branch: reused, never reset.
    start = git.branch_commit(repo, branch) or git.branch_commit(repo, spec.base)
    if start is None:
        raise WorktreeError(
            f"goal {goal.id!r}: base branch {spec.base!r} no longer exists in {repo}",
            hint=f"create it again, or change the goal's base: loopx goal add {goal.id} "
            "--update --worktree --base BRANCH",
        )
    now = utcnow()
    record = WorktreeRecord(
        goal_id=goal.id,
        repo=str(top),
        path=str(worktree_path(layout, goal)),
        branch=branch,
        base=spec.base,
        base_commit=start,
        phase=WorktreePhase.INTENDED,
        created_at=now,
        updated_at=now,
    )
    with fence.held():
        write_record(layout, record)
    return record


def clear_leftovers(layout: Layout, record: WorktreeRecord) -> list[Path]:
    """Remove the locks a killed git left in the half-made worktree, once their owner is gone.

    Returns:
        The lock files removed.

    Raises:
        WorktreeLockHeldError: LoopX's recorded git still runs, or a live process holds the
            repository while a lock is there: nothing was removed.
    """
    repo, path = Path(record.repo), Path(record.path)
    run = read_run(layout, record.goal_id)
    own = own_git_alive(run.pid, run.pid_started_at) if run is not None else None
    if own is not None:
        raise WorktreeLockHeldError(record.goal_id, path, [own])
    common = git.common_dir(repo)
    admins = admin_dirs_naming(common, path)
    mine = admin_dir(path) if path.is_dir() else None
    if mine is not None and mine.is_dir() and mine not in admins:
        admins.append(mine)
    locks = [lock for admin in admins for lock in leftover_locks(admin)]
    ref = branch_lock(common, record.branch)
    locks += [ref] if ref is not None else []
    if not locks:
        return []
    procs = Processes()
    holders = procs.holding(repo, common, path)
    if holders:
        raise WorktreeLockHeldError(record.goal_id, locks[0], holders)
    removed = remove_locks(locks, listed_at=procs.looked_at)
    log.warning("worktree_locks_removed", paths=[str(p) for p in removed])
    return removed


def _add(layout: Layout, record: WorktreeRecord, fence: Fence) -> None:
    """``git worktree add`` at the recorded path, or finish or redo what a killed one left."""
    repo, path, goal_id = Path(record.repo), Path(record.path), record.goal_id
    entry = git.entry_at(repo, path)
    if entry is not None and entry.branch not in (record.branch, None):
        raise WorktreeError(
            f"{path} is a worktree of branch {entry.branch}, not {record.branch}",
            hint=f"remove it (`git -C {repo} worktree remove {path}`) or move it away",
        )
    if entry is not None and entry.branch == record.branch and (path / ".git").is_file():
        # Registered and on our branch: a checkout a kill may have cut short. No turn ran
        # here yet (the record is not ready), so completing it loses nothing.
        run_recorded(layout, goal_id, fence, path, "reset", "-q", "--hard")
        return
    if path.exists():
        if not (path / ".git").is_file() and any(path.iterdir()):
            raise WorktreeError(
                f"{path} exists and is not a worktree LoopX began",
                hint="move it away; LoopX makes the goal's worktree there",
            )
        # Made by a `git worktree add` killed before it registered the folder or set its
        # branch: git's own files and a partial checkout, none of the goal's work.
        shutil.rmtree(path)
    git.run(repo, "worktree", "prune")  # forget a registration whose folder is gone
    ensure_dir(path.parent)
    if git.branch_commit(repo, record.branch) is not None:
        run_recorded(
            layout, goal_id, fence, repo, "worktree", "add", "-q", str(path), record.branch
        )
    else:
        run_recorded(
            layout, goal_id, fence, repo,
            "worktree", "add", "-q", "-b", record.branch, str(path), record.base_commit,
        )  # fmt: skip


def copy_included(repo: Path, worktree: Path, patterns: list[str]) -> list[str]:
    """Copy the files of ``repo`` matching ``patterns`` that git does not track into the worktree.

    Returns:
        The relative paths copied, sorted.
    """
    if not patterns:
        return []
    tracked = set(git.output(repo, "ls-files", "-z").split("\0"))
    copied: list[str] = []
    for pattern in patterns:
        for source in sorted(repo.glob(pattern)):
            rel = source.relative_to(repo)
            if rel.parts[:1] == (".git",) or str(rel) in tracked:
                continue
            files = (
                [source]
                if source.is_file()
                else sorted(p for p in source.rglob("*") if p.is_file())
            )
            for item in files:
                target = worktree / item.relative_to(repo)
                ensure_dir(target.parent)
                shutil.copy2(item, target)
                copied.append(str(item.relative_to(repo)))
    return sorted(set(copied))
