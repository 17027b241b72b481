"""The steps of a merge after its plan: merge, check, move, sync, finish (:mod:`loopx.worktree.merge`).

:func:`run_merge_steps` runs every step after the last one the merge journal
recorded, recording each before the next starts (fault point
``merge:<step>`` after it): the merge made in the scratch worktree, the
goal's done-check on the merged tree, the base's one compare-and-swap move,
its checkout brought along, and the finish (the scratch removed, a gate
opened or answered).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Final

from loopx import git
from loopx.errors import GitError
from loopx.faults import fault_point
from loopx.log import get_logger
from loopx.model import utcnow
from loopx.registry.goalrecords import Goal
from loopx.worktree.mergecheckout import bring_checkout
from loopx.worktree.mergegates import answer_merge_gates, gate_question, open_gate_once, reactivate
from loopx.worktree.mergejournal import MergeCheck, MergeJournal, MergeMode, MergeOutcome, MergeStep
from loopx.worktree.mergerun import MergeRun

log = get_logger(__name__)

# Runs the goal's done-check in a folder: its result, or None when the goal has no check.
CheckRunner = Callable[[Goal, Path], MergeCheck | None]
_IDENTITY: Final = {"user.name": "LoopX", "user.email": "loopx@localhost"}
# The outcomes of a merge that left the branch in the base.
ENDED_MERGED: Final = (MergeOutcome.MERGED, MergeOutcome.UP_TO_DATE, MergeOutcome.ALREADY_MERGED)


def run_merge_steps(run: MergeRun, goal: Goal, run_check: CheckRunner) -> MergeJournal:
    """Every step after the last recorded one: the step list is the code."""
    steps: tuple[tuple[MergeStep, Callable[[MergeRun], MergeJournal]], ...] = (
        (MergeStep.PLANNED, _merge),
        (MergeStep.MERGED, lambda r: _check(goal, r, run_check)),
        (MergeStep.CHECKED, _move),
        (MergeStep.MOVED, _sync),
        (MergeStep.SYNCED, _finish),
    )
    for after, step in steps:
        if run.journal.step is not after:
            continue
        run.record(step(run))
        fault_point(f"merge:{run.journal.step}")
    log.info("merge_finished", goal_id=goal.id, outcome=run.journal.outcome)
    return run.journal


def _dated(journal: MergeJournal) -> dict[str, str]:
    at = journal.created_at.isoformat()
    return {"GIT_AUTHOR_DATE": at, "GIT_COMMITTER_DATE": at}


def _identity(repo: Path) -> list[str]:
    """``-c`` options naming a committer when the repository has none configured."""
    options: list[str] = []
    for key, value in _IDENTITY.items():
        if git.run(repo, "config", key, check=False).returncode != 0:
            options += ["-c", f"{key}={value}"]
    return options


def _merge(run: MergeRun) -> MergeJournal:
    journal = run.journal
    repo = Path(journal.repo)
    if git.is_ancestor(repo, journal.branch_head, journal.base_old):
        return journal.model_copy(
            update={
                "step": MergeStep.SYNCED,  # nothing to merge, check or move
                "outcome": MergeOutcome.UP_TO_DATE,
                "merged_commit": journal.base_old,
            }
        )
    scratch = run.fresh_scratch(journal.base_old)
    who = _identity(repo)
    message = f"Merge {journal.branch} into {journal.base} (loopx goal {journal.goal_id})"
    if journal.mode is MergeMode.FF:
        args = ["merge", "-q", "--ff-only", journal.branch_head]
    elif journal.mode is MergeMode.MERGE:
        args = ["merge", "-q", "--no-ff", "--no-edit", "-m", message, journal.branch_head]
    else:
        args = ["merge", "-q", "--squash", journal.branch_head]
    done = run.git("merge", scratch, *who, *args, check=False, env=_dated(journal))
    if done.returncode != 0:
        conflicts = git.conflicted(scratch) if done.returncode > 0 else []
        if not conflicts:
            raise GitError(["git", *args], scratch, done.returncode, done.stderr + done.stdout)
        run.git("reset", scratch, "reset", "-q", "--hard")
        return run.journal.model_copy(
            update={
                "step": MergeStep.MERGED,
                "outcome": MergeOutcome.CONFLICT,
                "conflicts": conflicts,
            }
        )
    if journal.mode is MergeMode.SQUASH:
        if git.run(scratch, "diff", "--cached", "--quiet", check=False).returncode == 0:
            return run.journal.model_copy(  # nothing staged: the base has every change already
                update={
                    "step": MergeStep.SYNCED,
                    "outcome": MergeOutcome.ALREADY_MERGED,
                    "merged_commit": journal.base_old,
                }
            )
        squash = f"{journal.branch}: goal {journal.goal_id} (squashed by loopx)"
        run.git("commit", scratch, *who, "commit", "-q", "--no-verify", "-m", squash,
                env=_dated(journal))  # fmt: skip
    merged = git.output(scratch, "rev-parse", "HEAD")
    return run.journal.model_copy(update={"step": MergeStep.MERGED, "merged_commit": merged})


def _check(goal: Goal, run: MergeRun, run_check: CheckRunner) -> MergeJournal:
    journal = run.journal
    if journal.outcome is MergeOutcome.CONFLICT:
        return journal.model_copy(update={"step": MergeStep.SYNCED})  # straight to the gate
    assert journal.merged_commit is not None  # noqa: S101 - recorded with MERGED
    scratch = Path(journal.scratch)
    if not run.scratch_is_mine:
        # Made by a killed process (the check may have left files): start on the merged tree.
        scratch = run.fresh_scratch(journal.merged_commit)
    result = run_check(goal, scratch)
    if result is not None and not result.passed:
        return run.journal.model_copy(
            update={"step": MergeStep.SYNCED, "outcome": MergeOutcome.CHECK_FAILED, "check": result}
        )
    return run.journal.model_copy(update={"step": MergeStep.CHECKED, "check": result})


def _move(run: MergeRun) -> MergeJournal:
    """The one compare-and-swap that moves the base."""
    journal = run.journal
    assert journal.merged_commit is not None  # noqa: S101 - recorded with MERGED
    repo = Path(journal.repo)
    ref = f"refs/heads/{journal.base}"
    message = f"loopx: merge {journal.branch}"
    argv = ("update-ref", "-m", message, ref, journal.merged_commit, journal.base_old)
    done = run.git("move", repo, *argv, check=False)  # a lock's refusal is settled and retried
    if done.returncode != 0:
        now_at = git.branch_commit(repo, journal.base)
        if now_at == journal.base_old:  # refused for another reason (killed, a lock): redo
            raise GitError(["git", *run.journal.runs[-1].argv], repo, done.returncode, done.stderr)
        if now_at != journal.merged_commit:  # not our own move, redone after a kill
            log.warning(
                "merge_base_moved", base=journal.base, expected=journal.base_old, found=now_at
            )
            return run.journal.model_copy(
                update={"step": MergeStep.SYNCED, "outcome": MergeOutcome.BASE_MOVED}
            )
    return run.journal.model_copy(update={"step": MergeStep.MOVED, "outcome": MergeOutcome.MERGED})


def _sync(run: MergeRun) -> MergeJournal:
    """Bring the base's checkout (clean when planned) from the old tree to the merged one."""
    journal = run.journal
    assert journal.merged_commit is not None  # noqa: S101 - recorded with MERGED
    bring_checkout(run, journal.base_old, journal.merged_commit, action="sync")
    return run.journal.model_copy(update={"step": MergeStep.SYNCED})


def _finish(run: MergeRun) -> MergeJournal:
    layout = run.layout
    if run.scratch_left():
        run.remove_scratch()
    journal = run.journal
    now = utcnow()
    gate_id = journal.gate_id
    question = gate_question(journal)
    if question is not None:
        gate_id = open_gate_once(layout, journal, question, now=now).id
        if journal.outcome is not MergeOutcome.BASE_MOVED:  # the goal's work must change
            reactivate(layout, journal.goal_id, now=now)
    elif journal.outcome in ENDED_MERGED:
        answer_merge_gates(layout, journal, now=now)
    return journal.model_copy(update={"step": MergeStep.FINISHED, "gate_id": gate_id})
