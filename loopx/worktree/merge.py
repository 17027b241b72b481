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
point ``merge:<step>`` after it; :func:`merge_goal` on a goal with an
unfinished journal continues it. The merge commit is dated by the journal, so
a redone step makes the same commit.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Final

from loopx import environ, exitcodes, git
from loopx.errors import GitError, MergeRefusedError
from loopx.faults import fault_point
from loopx.log import get_logger
from loopx.registry.goals import get_goal
from loopx.registry.model import Goal, GoalStatus
from loopx.registry.store import update_goal
from loopx.registry.worktree_record import (
    FOLDER_NAME,
    MERGE_FOLDER,
    WorktreePhase,
    branch_of,
    read_record,
)
from loopx.root import Layout
from loopx.state import Gate, GoalState, update_state
from loopx.storage.files import ensure_dir
from loopx.storage.locks import locked
from loopx.worktree.mergejournal import (
    CHECK_TAIL_CHARS,
    MergeCheck,
    MergeJournal,
    MergeMode,
    MergeOutcome,
    MergeStep,
    read_merge_journal,
    write_merge_journal,
)

log = get_logger(__name__)

# Runs the goal's done-check in a folder: its result, or None when the goal has no check.
CheckRunner = Callable[[Goal, Path], MergeCheck | None]
MERGE_LOCK_WAIT_S: Final = 3600.0  # a merge waits this long for another of the same repository
_IDENTITY: Final = {"user.name": "LoopX", "user.email": "loopx@localhost"}


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
        GitError: git refused a step (the journal says which step completed last).
    """
    goal = get_goal(layout, goal_id)
    record = read_record(layout, goal_id)
    if goal.worktree is None or record is None or record.phase is not WorktreePhase.READY:
        raise MergeRefusedError(
            f"goal {goal_id!r} has no worktree to merge"
            + ("" if goal.worktree is None else " yet (it never ran)"),
            hint="merges take the branch of a `goal add --worktree` goal that has run",
        )
    repo = Path(record.repo)
    common = git.common_dir(repo)
    lock = merge_lock_file(layout, common)
    ensure_dir(lock.parent)
    with locked(lock, timeout=MERGE_LOCK_WAIT_S):
        journal = read_merge_journal(layout, goal_id)
        if journal is not None and _already_merged(repo, journal):
            return journal  # a rerun of a finished merge: nothing more to do, the record stays
        if journal is None or journal.finished:
            journal = _plan(layout, goal, repo, mode or MergeMode.MERGE, now=now)
            write_merge_journal(layout, journal)
            fault_point("merge:planned")
        else:
            log.info("merge_resumed", goal_id=goal_id, step=journal.step)
        return _run(layout, goal, journal, run_check, now=now)


def _already_merged(repo: Path, journal: MergeJournal) -> bool:
    """Whether ``journal`` finished merging the branch as it is now."""
    return (
        journal.finished
        and journal.outcome in (MergeOutcome.MERGED, MergeOutcome.UP_TO_DATE)
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
        created_at=now,
        updated_at=now,
    )


def _run(
    layout: Layout, goal: Goal, journal: MergeJournal, run_check: CheckRunner, *, now: datetime
) -> MergeJournal:
    """Every step after the last recorded one: the step list is the code."""
    steps = (
        (MergeStep.PLANNED, _merge),
        (MergeStep.MERGED, lambda j: _check(goal, j, run_check)),
        (MergeStep.CHECKED, _move),
        (MergeStep.MOVED, _sync),
        (MergeStep.SYNCED, lambda j: _finish(layout, j, now=now)),
    )
    for after, step in steps:
        if journal.step is not after:
            continue
        journal = step(journal).model_copy(update={"updated_at": now})
        write_merge_journal(layout, journal)
        fault_point(f"merge:{journal.step}")
    log.info("merge_finished", goal_id=goal.id, outcome=journal.outcome)
    return journal


def _dated(journal: MergeJournal) -> dict[str, str]:
    at = journal.created_at.isoformat()
    return {"GIT_AUTHOR_DATE": at, "GIT_COMMITTER_DATE": at}


def _fresh_scratch(journal: MergeJournal, commit: str) -> Path:
    """The scratch worktree, made again detached at ``commit`` (it is LoopX's own, never work)."""
    repo, scratch = Path(journal.repo), Path(journal.scratch)
    if git.entry_at(repo, scratch) is not None:
        git.run(repo, "worktree", "remove", "--force", str(scratch))
    if scratch.exists():
        shutil.rmtree(scratch)
    git.run(repo, "worktree", "prune")
    ensure_dir(scratch.parent)
    git.run(repo, "worktree", "add", "-q", "--detach", str(scratch), commit)
    return scratch


def _identity(repo: Path) -> list[str]:
    """``-c`` options naming a committer when the repository has none configured."""
    options: list[str] = []
    for key, value in _IDENTITY.items():
        if git.run(repo, "config", key, check=False).returncode != 0:
            options += ["-c", f"{key}={value}"]
    return options


def _merge(journal: MergeJournal) -> MergeJournal:
    repo = Path(journal.repo)
    if git.is_ancestor(repo, journal.branch_head, journal.base_old):
        return journal.model_copy(
            update={
                "step": MergeStep.SYNCED,  # nothing to merge, check or move
                "outcome": MergeOutcome.UP_TO_DATE,
                "merged_commit": journal.base_old,
            }
        )
    scratch = _fresh_scratch(journal, journal.base_old)
    who = _identity(repo)
    message = f"Merge {journal.branch} into {journal.base} (loopx goal {journal.goal_id})"
    if journal.mode is MergeMode.FF:
        args = ["merge", "-q", "--ff-only", journal.branch_head]
    elif journal.mode is MergeMode.MERGE:
        args = ["merge", "-q", "--no-ff", "--no-edit", "-m", message, journal.branch_head]
    else:
        args = ["merge", "-q", "--squash", journal.branch_head]
    done = git.run(scratch, *who, *args, check=False, env=_dated(journal))
    if done.returncode != 0:
        conflicts = git.conflicted(scratch)
        if not conflicts:
            raise GitError(["git", *args], scratch, done.returncode, done.stderr + done.stdout)
        git.run(scratch, "reset", "-q", "--hard")
        return journal.model_copy(
            update={
                "step": MergeStep.MERGED,
                "outcome": MergeOutcome.CONFLICT,
                "conflicts": conflicts,
            }
        )
    if journal.mode is MergeMode.SQUASH:
        squash = f"{journal.branch}: goal {journal.goal_id} (squashed by loopx)"
        git.run(scratch, *who, "commit", "-q", "--no-verify", "-m", squash, env=_dated(journal))
    merged = git.output(scratch, "rev-parse", "HEAD")
    return journal.model_copy(update={"step": MergeStep.MERGED, "merged_commit": merged})


def _check(goal: Goal, journal: MergeJournal, run_check: CheckRunner) -> MergeJournal:
    if journal.outcome is MergeOutcome.CONFLICT:
        return journal.model_copy(update={"step": MergeStep.SYNCED})  # straight to the gate
    assert journal.merged_commit is not None  # noqa: S101 - recorded with MERGED
    scratch = Path(journal.scratch)
    if scratch.is_dir() and git.entry_at(Path(journal.repo), scratch) is not None:
        # A check killed half-way may have left files: start it on the merged tree again.
        git.run(scratch, "reset", "-q", "--hard", journal.merged_commit)
        git.run(scratch, "clean", "-q", "-ffdx")
    else:
        scratch = _fresh_scratch(journal, journal.merged_commit)
    result = run_check(goal, scratch)
    if result is not None and not result.passed:
        return journal.model_copy(
            update={"step": MergeStep.SYNCED, "outcome": MergeOutcome.CHECK_FAILED, "check": result}
        )
    return journal.model_copy(update={"step": MergeStep.CHECKED, "check": result})


def _move(journal: MergeJournal) -> MergeJournal:
    """The one compare-and-swap that moves the base."""
    assert journal.merged_commit is not None  # noqa: S101 - recorded with MERGED
    repo = Path(journal.repo)
    ref = f"refs/heads/{journal.base}"
    message = f"loopx: merge {journal.branch}"
    done = git.run(
        repo, "update-ref", "-m", message, ref, journal.merged_commit, journal.base_old, check=False
    )
    if done.returncode != 0:
        now_at = git.branch_commit(repo, journal.base)
        if now_at != journal.merged_commit:  # not our own move, redone after a kill
            log.warning(
                "merge_base_moved", base=journal.base, expected=journal.base_old, found=now_at
            )
            return journal.model_copy(
                update={"step": MergeStep.SYNCED, "outcome": MergeOutcome.BASE_MOVED}
            )
    return journal.model_copy(update={"step": MergeStep.MOVED, "outcome": MergeOutcome.MERGED})


def _sync(journal: MergeJournal) -> MergeJournal:
    """Bring the base's checkout (clean when planned) from the old tree to the merged one."""
    assert journal.merged_commit is not None  # noqa: S101 - recorded with MERGED
    if journal.checkout is not None and Path(journal.checkout).is_dir():
        where = Path(journal.checkout)
        index_tree = git.output(where, "write-tree")
        if index_tree != git.tree_of(where, journal.merged_commit):
            git.run(where, "read-tree", "-m", "-u", journal.base_old, journal.merged_commit)
    return journal.model_copy(update={"step": MergeStep.SYNCED})


def _finish(layout: Layout, journal: MergeJournal, *, now: datetime) -> MergeJournal:
    repo, scratch = Path(journal.repo), Path(journal.scratch)
    if git.entry_at(repo, scratch) is not None:
        git.run(repo, "worktree", "remove", "--force", str(scratch))
    if scratch.exists():
        shutil.rmtree(scratch)
    git.run(repo, "worktree", "prune")
    gate_id = journal.gate_id
    question = gate_question(journal)
    if question is not None:
        gate_id = _open_gate_once(layout, journal, question, now=now).id
        _reactivate(layout, journal.goal_id, now=now)
    return journal.model_copy(update={"step": MergeStep.FINISHED, "gate_id": gate_id})


def gate_question(journal: MergeJournal) -> str | None:
    """What the gate a failed merge opens asks (None: no gate is due). Pure."""
    into = f"merge of {journal.branch} into {journal.base}"
    after = "; answer this gate and the goal runs again"
    if journal.outcome is MergeOutcome.CONFLICT:
        files = ", ".join(journal.conflicts[:50])
        return (
            f"{into} conflicts in: {files}. The base is unchanged. Merge {journal.base} into "
            f"{journal.branch} and resolve them{after}"
        )
    if journal.outcome is MergeOutcome.CHECK_FAILED and journal.check is not None:
        tail = journal.check.output_tail[-CHECK_TAIL_CHARS:]
        code = "timed out" if journal.check.exit_code is None else f"exit {journal.check.exit_code}"
        return (
            f"{into}: the done-check failed on the merged tree ({code}); the base is "
            f"unchanged. Make it pass{after}. Its output ends:\n{tail}"
        )
    if journal.outcome is MergeOutcome.BASE_MOVED:
        return (
            f"{into}: {journal.base} moved while the merge ran; the base is unchanged. "
            f"Run `loopx goal merge {journal.goal_id}` again{after}"
        )
    return None


def _open_gate_once(layout: Layout, journal: MergeJournal, question: str, *, now: datetime) -> Gate:
    """Open the merge's gate, or find it opened by this merge before a kill."""
    opener = f"merge:{journal.created_at.isoformat()}"
    found: list[Gate] = []

    def change(state: GoalState) -> GoalState:
        mine = [g for g in state.gates if g.opened_by == opener]
        if mine:
            found.append(mine[0])
            return state
        gate = Gate(
            id=max((g.id for g in state.gates), default=0) + 1,
            question=question[:4000],
            opened_at=now,
            opened_by=opener,
        )
        found.append(gate)
        return state.model_copy(update={"gates": [*state.gates, gate], "updated_at": now})

    update_state(layout, journal.goal_id, change)
    return found[0]


def _reactivate(layout: Layout, goal_id: str, *, now: datetime) -> None:
    """A done goal whose merge failed goes back to its agent (after the gate's answer)."""

    def change(goal: Goal | None) -> Goal:
        assert goal is not None  # noqa: S101 - the merge read it under the same root
        if goal.status is not GoalStatus.DONE:
            return goal
        return goal.model_copy(update={"status": GoalStatus.ACTIVE, "updated_at": now})

    update_goal(layout, goal_id, change)


def merge_in_child(layout: Layout, goal_id: str) -> MergeJournal:
    """`loopx goal merge ID` run as a child process, for callers inside the kernel.

    The dashboard's merge action uses it: the done-check runner lives with the
    agents, which the kernel never imports (a process boundary, as the
    supervisor starts its agents).

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
