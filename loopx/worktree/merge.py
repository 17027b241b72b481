"""`loopx goal merge`: a completed worktree goal's branch into its base, after the check passes.

One merge at a time per repository (a lock under the root keyed by the
repository's common git directory). The merge is made in a scratch worktree
detached at the base's commit; the goal's done-check (if it has one) runs
there on the merged tree; only then does the base branch move, by
``git update-ref`` with the planned old commit as the expected value (a base
that moved meanwhile is refused, untouched). The checkout that has the base
checked out (checked clean when the merge was planned) is then brought to the
merged tree. A conflict or a failing check leaves the base as it was, opens a
gate on the goal naming the files or holding the check's output, and makes the
goal active again: it goes back to its agent once the gate is answered.

Each step is recorded in ``goals/<id>/merge.json``
(:mod:`loopx.worktree.mergejournal`) before the next one starts, with a fault
point ``merge:<step>`` after it, and each git command inside a step is a
journaled run (:mod:`loopx.worktree.mergerun`); :func:`merge_goal` on a goal
with an unfinished journal first settles what a killed git left, then redoes
the step. The merge commit is dated by the journal, so a redone step makes
the same commit. :func:`abort_merge` (``--abort``) cancels an unfinished merge
instead: the scratch worktree goes, and a base already moved goes back.

A squash that stages nothing (the base already has every change of the
branch) ends as ``already_merged``: nothing moves, the goal stays done. A
base that moved while the merge ran leaves the goal done with a gate saying
``loopx goal merge ID`` merges it onto the new base; a conflict or a failing
check makes the goal active again, its gate naming ``loopx gate resolve``.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Final

from loopx import environ, exitcodes, git
from loopx.errors import MergeRefusedError
from loopx.faults import fault_point
from loopx.log import get_logger
from loopx.registry.goalrecords import Goal, GoalStatus
from loopx.registry.goals import get_goal
from loopx.registry.worktree_record import (
    FOLDER_NAME,
    MERGE_FOLDER,
    WorktreePhase,
    branch_of,
    read_record,
)
from loopx.root import Layout
from loopx.storage.dirs import ensure_dir
from loopx.storage.locks import locked
from loopx.worktree.mergecheckout import bring_checkout
from loopx.worktree.mergejournal import (
    MergeJournal,
    MergeMark,
    MergeMode,
    MergeOutcome,
    MergeStep,
    read_merge_journal,
)
from loopx.worktree.mergerun import MergeRun
from loopx.worktree.mergesteps import ENDED_MERGED, CheckRunner, run_merge_steps

log = get_logger(__name__)

MERGE_LOCK_WAIT_S: Final = 3600.0  # a merge waits this long for another of the same repository


def merge_lock_file(layout: Layout, common_dir: Path) -> Path:
    """The lock one repository's merges share: ``<root>/worktrees/.merge/<hash>``."""
    digest = hashlib.sha256(str(common_dir).encode()).hexdigest()[:16]
    return layout.root / FOLDER_NAME / MERGE_FOLDER / f"repo-{digest}"


def scratch_path(layout: Layout, goal_id: str) -> Path:
    """The scratch worktree a goal's merge is made in."""
    return layout.root / FOLDER_NAME / MERGE_FOLDER / goal_id


def merge_goal(
    layout: Layout,
    goal_id: str,
    *,
    mode: MergeMode | None,
    run_check: CheckRunner,
    now: datetime,
) -> MergeJournal:
    """Merge the goal's branch into its base, or finish the merge a kill interrupted.

    ``mode`` None: the unfinished merge's mode, else ``merge``.

    Returns:
        The finished journal (its ``outcome`` says what happened).

    Raises:
        MergeRefusedError: not a worktree goal, not done, nothing made yet, its worktree
            or the base's checkout has uncommitted changes, or ``ff`` cannot fast-forward.
        MergeBusyError: a process still holds what a killed merge left; nothing changed.
        GitError: git refused a step (the journal says which step completed last).
    """
    goal = get_goal(layout, goal_id)
    repo = _repo_of(layout, goal)
    with locked(_lock(layout, repo), timeout=MERGE_LOCK_WAIT_S):
        journal = read_merge_journal(layout, goal_id)
        if journal is not None and _already_merged(repo, journal):
            return journal  # a rerun of a finished merge: nothing more to do, the record stays
        if journal is None or journal.finished:
            run = MergeRun(layout, _plan(layout, goal, repo, mode or MergeMode.MERGE, now=now))
            run.settle()  # a scratch worktree an older LoopX left
            run.record(run.journal)
            fault_point("merge:planned")
        else:
            log.info("merge_resumed", goal_id=goal_id, step=journal.step)
            run = MergeRun(layout, journal)
            run.settle()
        return run_merge_steps(run, goal, run_check)


def abort_merge(layout: Layout, goal_id: str) -> MergeJournal:
    """`loopx goal merge ID --abort`: cancel the goal's unfinished merge, undoing what it did.

    What a killed git left is settled first; the scratch worktree goes; a base the merge
    already moved goes back to its old commit (compare-and-swap), and its checkout with it.
    The goal keeps its status (done: `loopx goal merge` starts a new merge).

    Returns:
        The journal, ``aborted``, its ``undone`` saying what was undone.

    Raises:
        MergeRefusedError: no merge is in progress, or the base moved on since the merge
            moved it (nothing undone: finish it with `loopx goal merge`).
        MergeBusyError: a process still holds what a killed merge left; nothing changed.
    """
    goal = get_goal(layout, goal_id)
    repo = _repo_of(layout, goal)
    with locked(_lock(layout, repo), timeout=MERGE_LOCK_WAIT_S):
        journal = read_merge_journal(layout, goal_id)
        if journal is None or journal.finished:
            raise MergeRefusedError(
                f"goal {goal_id!r} has no merge in progress, nothing to abort",
                hint=f"see its last merge with `loopx goal show {goal_id}`",
            )
        run = MergeRun(layout, journal)
        undone = run.settle()
        undone += _move_back(run)
        if run.scratch_left():
            run.remove_scratch()
            undone.append(f"removed the scratch worktree {journal.scratch}")
        done = run.journal.model_copy(
            update={
                "step": MergeStep.ABORTED,
                "outcome": MergeOutcome.ABORTED,
                "undone": undone or ["nothing: the merge had made nothing yet"],
            }
        )
        log.info("merge_aborted", goal_id=goal_id, undone=done.undone)
        return run.record(done)


_MAY_HAVE_MOVED: Final = (MergeStep.CHECKED, MergeStep.MOVED, MergeStep.SYNCED)


def _move_back(run: MergeRun) -> list[str]:
    """Put the base (and its checkout) back where the merge found it, if the merge moved it.

    A move killed before it was recorded (step ``checked``) is found by the base pointing at
    the merged commit.
    """
    journal = run.journal
    merged = journal.merged_commit
    if (
        merged is None
        or merged == journal.base_old
        or journal.step not in _MAY_HAVE_MOVED
        or journal.outcome not in (MergeOutcome.PENDING, MergeOutcome.MERGED)
    ):
        return []
    repo = Path(journal.repo)
    at = git.branch_commit(repo, journal.base)
    undone = []
    if at == merged:
        run.git("move_back", repo, "update-ref", "-m", f"loopx: abort merge {journal.branch}",
                f"refs/heads/{journal.base}", journal.base_old, merged)  # fmt: skip
        undone.append(f"moved {journal.base} back from {merged[:12]} to {journal.base_old[:12]}")
    elif at != journal.base_old and journal.outcome is MergeOutcome.MERGED:
        raise MergeRefusedError(
            f"goal {journal.goal_id}: {journal.base} moved on from the merged commit "
            f"{merged[:12]} to {(at or 'nothing')[:12]}; the merge cannot be undone",
            hint=f"finish it with `loopx goal merge {journal.goal_id}`",
        )
    elif at != journal.base_old:
        return undone  # moved by someone else, never by this merge: its checkout is theirs
    if bring_checkout(run, merged, journal.base_old, action="unsync"):
        undone.append(f"brought the checkout {journal.checkout} back to {journal.base_old[:12]}")
    return undone


def _repo_of(layout: Layout, goal: Goal) -> Path:
    record = read_record(layout, goal.id)
    if goal.worktree is None or record is None or record.phase is not WorktreePhase.READY:
        raise MergeRefusedError(
            f"goal {goal.id!r} has no worktree to merge"
            + ("" if goal.worktree is None else " yet (it never ran)"),
            hint="merges take the branch of a `goal add --worktree` goal that has run",
        )
    return Path(record.repo)


def _lock(layout: Layout, repo: Path) -> Path:
    lock = merge_lock_file(layout, git.common_dir(repo))
    ensure_dir(lock.parent)
    return lock


def _already_merged(repo: Path, journal: MergeJournal) -> bool:
    """Whether ``journal`` finished merging the branch as it is now."""
    return (
        journal.step is MergeStep.FINISHED
        and journal.outcome in ENDED_MERGED
        and git.branch_commit(repo, journal.branch) == journal.branch_head
    )


def _plan(
    layout: Layout, goal: Goal, repo: Path, mode: MergeMode, *, now: datetime
) -> MergeJournal:
    spec = goal.worktree
    assert spec is not None  # noqa: S101 - checked by the caller
    branch = branch_of(goal.id)
    if goal.status is not GoalStatus.DONE:
        raise MergeRefusedError(
            f"goal {goal.id!r} is {goal.status}, not done: a merge takes a completed goal's work",
            hint=f"wait for it to complete, or mark it done with `loopx goal done {goal.id}`",
        )
    base_old = git.branch_commit(repo, spec.base)
    if base_old is None:
        raise MergeRefusedError(
            f"goal {goal.id!r}: base branch {spec.base!r} does not exist in {repo}",
            hint=f"create it again (`git -C {repo} branch {spec.base} ...`)",
        )
    head = git.branch_commit(repo, branch)
    if head is None:
        raise MergeRefusedError(
            f"goal {goal.id!r}: branch {branch} does not exist in {repo}",
            hint="it was deleted outside LoopX; nothing to merge",
        )
    worktree = git.checkout_of(repo, branch)
    if worktree is not None and (dirty := git.changes(worktree.path, untracked=False)):
        raise MergeRefusedError(
            f"goal {goal.id!r}: its worktree {worktree.path} has uncommitted changes "
            f"({', '.join(dirty[:5])}) the merge would leave out",
            hint=f"commit or discard them (`git -C {worktree.path} status`), then merge again",
        )
    checkout = git.checkout_of(repo, spec.base)
    if checkout is not None and (dirty := git.changes(checkout.path, untracked=False)):
        raise MergeRefusedError(
            f"base {spec.base} has uncommitted changes in {checkout.path} "
            f"({', '.join(dirty[:5])}); nothing was merged or moved",
            hint=f"commit or stash them (`git -C {checkout.path} stash`), then merge again",
        )
    if mode is MergeMode.FF and not git.is_ancestor(repo, base_old, head):
        raise MergeRefusedError(
            f"goal {goal.id!r}: {spec.base} moved since {branch} left it; "
            "a fast-forward is impossible",
            hint=f"use --mode merge or --mode squash, or rebase {branch} onto {spec.base}",
        )
    return MergeJournal(
        goal_id=goal.id,
        repo=str(repo),
        base=spec.base,
        branch=branch,
        mode=mode,
        base_old=base_old,
        branch_head=head,
        scratch=str(scratch_path(layout, goal.id)),
        checkout=str(checkout.path) if checkout is not None else None,
        marks=[MergeMark(step=MergeStep.PLANNED, at=now)],
        created_at=now,
        updated_at=now,
    )


def merge_in_child(layout: Layout, goal_id: str) -> MergeJournal:
    """`loopx goal merge ID` run as a child process.

    The dashboard's merge action makes this call (the API hands it to the
    server): the merge and its done-check, whose runner lives with the agents,
    run in a process of their own (a process boundary, as the supervisor
    starts its agents), and the server's thread only waits for the journal.

    Raises:
        MergeRefusedError: the merge was refused or failed (the child's error line).
    """
    argv = [sys.executable, "-m", "loopx", "--root", str(layout.root), "--registry",
            str(layout.registry), "goal", "merge", goal_id, "--json"]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != environ.FAULT}
    done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    if done.returncode in (exitcodes.OK, exitcodes.NEEDS_HUMAN):
        return MergeJournal.model_validate_json(done.stdout)
    lines = done.stderr.strip().splitlines() or [f"exit code {done.returncode}"]
    message = lines[0].removeprefix("loopx: error: ")
    hint = lines[1].removeprefix("hint: ") if len(lines) > 1 else None
    raise MergeRefusedError(message, hint=hint)
