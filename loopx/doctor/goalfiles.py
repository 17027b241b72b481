"""One goal's durable files: state, run history, quota ledger and aggregate, run logs.

And whether every finished turn reached them.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel

from loopx.doctor.findings import Checker, FindingCode, Severity, listed_files, q
from loopx.doctor.journals import check_lease_and_journals
from loopx.doctor.merges import check_merge
from loopx.doctor.reliability import check_future_dated
from loopx.doctor.sandboxes import check_sandbox
from loopx.doctor.worktreecheck import check_worktree
from loopx.errors import CorruptFileError, UnsafePathError
from loopx.ids import is_valid_goal_id
from loopx.model import Record
from loopx.quota.aggregate import SpendAggregate
from loopx.quota.ledger import SpendRecord
from loopx.registry.goalrecords import Goal
from loopx.state import GoalState
from loopx.turn.checkpoint import CHECKPOINT_NAME, read_checkpoint
from loopx.turn.historyline import HistoryLine
from loopx.turn.journal import TurnJournal
from loopx.turn.runlog import RunReport


def check_goal(doc: Checker, goal_id: str, *, registered: bool) -> None:
    """Every file of one goal directory, then the cross-check against its journals.

    ``registered``: an old single-file registry holds the policy (no goal.json to check).
    """
    layout = doc.layout
    goal_dir = layout.goals_dir / goal_id
    if not is_valid_goal_id(goal_id):
        doc.add(
            Severity.WARNING,
            FindingCode.UNEXPECTED_ENTRY,
            goal_dir,
            "not a valid goal id; LoopX ignores it",
            f"move it out of {q(layout.goals_dir)}",
        )
        return
    if goal_dir.is_symlink() or not goal_dir.is_dir():
        return  # reported by the walk (symlink) or not a goal
    doc.goals += 1
    policy = layout.goal_file(goal_id)
    goal = None
    if not registered:
        goal = doc.model(
            policy,
            Goal,
            f"restore {q(policy)} from a backup, or register the goal again with "
            f"`loopx goal add {goal_id} --update ...`",
            goal_id=goal_id,
        )
    if not registered and not policy.exists():
        doc.add(
            Severity.WARNING,
            FindingCode.ORPHAN_GOAL,
            goal_dir,
            "a goal directory without a goal file (goal.json)",
            f"loopx archive {goal_id}  (or re-register it with `loopx goal add {goal_id} ...`)",
            goal_id,
        )
    replay = f"loopx replay {goal_id} --repair"
    state = doc.model(layout.state_file(goal_id), GoalState, replay, goal_id=goal_id)
    history = doc.lines(layout.history_file(goal_id), HistoryLine, goal_id, replay)
    ledger = doc.lines(layout.quota_file(goal_id), SpendRecord, goal_id, replay)
    agg = layout.quota_aggregate_file(goal_id)
    doc.model(
        agg,
        SpendAggregate,
        f"rm {q(agg)}  (a cache; rebuilt on the next read)",
        severity=Severity.WARNING,
        goal_id=goal_id,
    )
    for path in listed_files(layout.runs_dir(goal_id), ".json"):
        doc.model(path, RunReport, replay, severity=Severity.WARNING, goal_id=goal_id)
    finished = check_lease_and_journals(doc, goal_id)
    through = _checkpoint_through(doc, goal_id)
    # Journals a checkpoint folds have no lines left by design; the next gc removes them.
    finished = [j for j in finished if j.seq > through]
    cross_check(doc, goal_id, finished=finished, state=state, history=history, ledger=ledger)
    check_future_dated(doc, goal_id, state, ledger)
    if isinstance(goal, Goal):
        check_worktree(doc, goal)
        check_sandbox(doc, goal)
    check_merge(doc, goal_id)


def _checkpoint_through(doc: Checker, goal_id: str) -> int:
    """The seq the goal's checkpoint folds through (0 without one); a damaged one is a finding."""
    try:
        checkpoint = read_checkpoint(doc.layout, goal_id)
    except CorruptFileError as e:
        doc.add(
            Severity.ERROR,
            FindingCode.SCHEMA,
            doc.layout.goal_dir(goal_id) / CHECKPOINT_NAME,
            e.problem,
            "restore it from a backup: the journals it replaced are gone, so replay cannot "
            "rebuild the goal without it",
            goal_id,
        )
        return 0
    except (UnsafePathError, OSError) as e:
        doc.add(
            Severity.ERROR,
            FindingCode.SCHEMA,
            doc.layout.goal_dir(goal_id) / CHECKPOINT_NAME,
            f"cannot be read: {e}",
            "restore it from a backup",
            goal_id,
        )
        return 0
    return checkpoint.through_seq if checkpoint is not None else 0


def cross_check(
    doc: Checker,
    goal_id: str,
    *,
    finished: list[TurnJournal],
    state: BaseModel | None,
    history: list[Record] | None,
    ledger: list[Record] | None,
) -> None:
    """Every finished turn must have its history line, its ledger line, and be in the state."""
    layout = doc.layout
    repair = f"loopx replay {goal_id} --repair  (rebuilds them from the journals)"
    checks: tuple[tuple[Path, list[Record] | None, Callable[[TurnJournal], bool], str], ...] = (
        (layout.history_file(goal_id), history, _any_turn, "history line"),
        (layout.quota_file(goal_id), ledger, _host_ran, "ledger line"),
    )
    for path, records, needed, what in checks:
        if records is None:
            continue  # damaged: reported already
        keys = {getattr(r, "turn_key", None) for r in records}
        missing = [j.turn_key for j in finished if needed(j) and j.turn_key not in keys]
        if missing:
            doc.add(
                Severity.ERROR,
                FindingCode.MISSING_RECORD,
                path,
                f"no {what} for {len(missing)} finished turn(s): {', '.join(missing[:5])}",
                repair,
                goal_id,
            )
    newest = max((j.seq for j in finished), default=0)
    if isinstance(state, GoalState) and state.turn_seq < newest:
        doc.add(
            Severity.ERROR,
            FindingCode.MISSING_RECORD,
            layout.state_file(goal_id),
            f"the state is at turn {state.turn_seq} but turn {newest} finished",
            repair,
            goal_id,
        )
    elif state is None and finished and not layout.state_file(goal_id).exists():
        doc.add(
            Severity.ERROR,
            FindingCode.MISSING_FILE,
            layout.state_file(goal_id),
            "missing, though turns finished",
            repair,
            goal_id,
        )


def _any_turn(_journal: TurnJournal) -> bool:
    return True


def _host_ran(journal: TurnJournal) -> bool:
    return journal.outcome is not None
