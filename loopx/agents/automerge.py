"""The agent's side of worktree merges: the done-check on a merged tree, auto-merge, recovery.

:func:`merge` is :func:`loopx.worktree.merge.merge_goal` with the goal's
done-check run by the one runner of checks
(:func:`loopx.agents.checkrun.run_done_check`) in the merge's scratch
worktree, inside the goal's sandbox when it has one. :func:`auto_merge` merges a goal with ``--auto-merge`` once a turn
made it done, through the same path; :func:`resume_merges` finishes every
merge a kill interrupted (`loopx recover`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from loopx import environ
from loopx.accounts.records import account_of
from loopx.agents.checkrun import run_done_check
from loopx.agents.sandbox.sandboxturn import TurnSandbox
from loopx.errors import GitError, LoopxError, MergeBusyError, MergeRefusedError
from loopx.ids import is_valid_goal_id
from loopx.log import get_logger
from loopx.model import utcnow
from loopx.registry.goalrecords import Goal, GoalStatus
from loopx.registry.goals import get_goal, open_gate
from loopx.root import Layout
from loopx.worktree.merge import abort_merge, merge_goal
from loopx.worktree.mergejournal import (
    CHECK_TAIL_CHARS,
    MergeCheck,
    MergeJournal,
    MergeMode,
    read_merge_journal,
)
from loopx.worktree.mergesteps import CheckRunner

log = get_logger(__name__)


def merged_tree_check(layout: Layout) -> CheckRunner:
    """The check runner a merge of ``layout``'s goals uses (see :func:`merge`)."""

    def run(goal: Goal, where: Path) -> MergeCheck | None:
        spec = goal.done_check
        if spec is None:
            return None
        env = environ.without((environ.FAULT,))
        own = {environ.GOAL_ID: goal.id, environ.WORKDIR: str(where)}
        env.update(own)
        argv = list(spec.argv)
        # A sandboxed goal's check runs in its sandbox on the merged tree too, as in its turns.
        sandbox = None
        if goal.sandbox is not None:
            sandbox = TurnSandbox(
                layout,
                goal.id,
                goal.sandbox,
                account=account_of(goal.account, goal.host.kind),
                host_kind=goal.host.kind,
            )
            env = sandbox.environment(env, own)
            argv = sandbox.wrap(argv, cwd=where, env=env, result_file=None)
        try:
            result = run_done_check(
                argv, cwd=where, timeout_s=spec.timeout_s, env=env, loopx_root=str(layout.root)
            )
        finally:
            if sandbox is not None:
                sandbox.close()
        return MergeCheck(
            exit_code=None if result.timed_out else result.exit_code,
            passed=result.passed,
            output_tail=result.output_tail[-CHECK_TAIL_CHARS:],
        )

    return run


def merge(
    layout: Layout, goal_id: str, *, mode: MergeMode | None = None, now: datetime | None = None
) -> MergeJournal:
    """`loopx goal merge`: merge (or finish merging) the goal's branch into its base.

    Raises:
        MergeRefusedError: the goal cannot be merged now (why, in the message).
        GitError: git refused a step; a rerun continues from the last recorded one.
    """
    return merge_goal(
        layout, goal_id, mode=mode, run_check=merged_tree_check(layout), now=now or utcnow()
    )


def auto_merge(layout: Layout, goal_id: str) -> MergeJournal | None:
    """Merge a goal with ``--auto-merge`` that a turn just made done (None: nothing to do).

    A merge that cannot start (a dirty base, a base that moved under ``ff``) opens a gate
    saying so; the goal stays done and `loopx goal merge` can be run by hand.
    """
    goal = get_goal(layout, goal_id)
    if not goal.auto_merge or goal.worktree is None or goal.status is not GoalStatus.DONE:
        return None
    try:
        return merge(layout, goal_id)
    except (MergeRefusedError, GitError) as e:
        log.warning("auto_merge_refused", goal_id=goal_id, error=e.message)
        open_gate(
            layout,
            goal_id,
            f"auto-merge did not run: {e.message}. Fix it and run `loopx goal merge {goal_id}`",
            now=utcnow(),
            opened_by="auto-merge",
        )
        return None


@dataclass(slots=True)
class ResumedMerges:
    """What :func:`resume_merges` did."""

    finished: list[str] = field(default_factory=list)  # goals whose merge was finished
    cancelled: list[str] = field(default_factory=list)  # goal: why, for merges cancelled
    waiting: list[str] = field(default_factory=list)  # goal: the live process it waits for
    errors: list[str] = field(default_factory=list)  # goal: message, for merges left as they are


def resume_merges(layout: Layout, *, now: datetime | None = None) -> ResumedMerges:
    """Finish every merge a kill interrupted; cancel one that cannot be finished.

    A merge whose repository a live process still holds is left for later (``waiting``);
    one git refuses to finish is aborted (:func:`loopx.worktree.merge.abort_merge`).
    """
    done = ResumedMerges()
    goals_dir = layout.goals_dir
    for goal_id in sorted(os.listdir(goals_dir)) if goals_dir.is_dir() else []:
        if not is_valid_goal_id(goal_id):
            continue
        try:
            journal = read_merge_journal(layout, goal_id)
            if journal is None or journal.finished:
                continue
            merge(layout, goal_id, now=now)
            done.finished.append(goal_id)
        except MergeBusyError as e:
            done.waiting.append(f"{goal_id}: {e.message}")
        except LoopxError as e:
            try:
                abort_merge(layout, goal_id)
            except LoopxError as again:
                done.errors.append(f"{goal_id}: {e.message}; cancelling failed: {again.message}")
                continue
            log.warning("merge_cancelled", goal_id=goal_id, error=e.message)
            done.cancelled.append(f"{goal_id}: {e.message}")
    return done
