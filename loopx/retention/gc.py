"""``loopx gc``: fold each goal's old turns into its checkpoint and remove what it replaces.

For one goal, a pass (under the goal's lease, so no turn runs meanwhile):

1. plan the fold (:func:`loopx.retention.foldplan.plan_fold`);
2. fold the previous checkpoint and the folded journals with the turn's own pure
   functions and write the new checkpoint atomically: from here it is the record;
3. settle (:mod:`loopx.retention.settle`): remove or keep what it replaces.

A kill anywhere leaves either the old files or the checkpoint plus the files
still to remove; the next pass (or ``loopx gc`` again) settles them first and
converges to the files of an undisturbed pass. A leased goal is skipped.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Final, Literal

from loopx.errors import CorruptFileError, LoopxError
from loopx.faults import fault_point
from loopx.ids import is_valid_goal_id
from loopx.log import get_logger
from loopx.model import Record
from loopx.quota.ledger import refold_aggregate
from loopx.registry.goals import get_goal
from loopx.retention.foldplan import FoldPlan, TurnMeta, plan_fold
from loopx.retention.policy import KeepPolicy, RetentionSettings, load_settings
from loopx.retention.settle import Tally, expire, notable, settle, unsettled
from loopx.root import Layout
from loopx.root.hints import note_goal_changed
from loopx.storage.files import (
    atomic_write_model,
    read_bytes,
)
from loopx.turn.checkpoint import (
    CHECKPOINT_NAME,
    KEPT_DIR,
    Checkpoint,
    FoldedCounts,
    chain_digest,
    read_checkpoint,
    sealed,
)
from loopx.turn.clockshift import ClockShift, read_shifts
from loopx.turn.fold import fold_state
from loopx.turn.inspection import RecoveryDecision, inspect
from loopx.turn.journal import TurnJournal, journal_files, parse_turn_key
from loopx.turn.lease import claim, fence_of, release
from loopx.turn.phases import spend_record

log = get_logger(__name__)

GC_AGENT_ID: Final = "gc"
DEFAULT_TURNS_PER_GOAL: Final = 1000  # one pass folds at most this many turns of a goal
# A goal whose policy cannot be read keeps the default window's lines.
_DEFAULT_LEDGER_WINDOW: Final = timedelta(hours=24)
_NEVER: Final = datetime.max.replace(tzinfo=UTC)


class GoalCollection(Record):
    """What one pass did (or, dry, would do) to one goal."""

    goal_id: str
    skipped: str | None = None  # why the goal was left alone
    through_seq: int | None = None  # the goal's checkpoint after the pass
    folded: int = 0  # turns folded into the checkpoint
    kept: int = 0  # folded turns whose record moved to kept/
    expired: int = 0  # kept records removed
    files: int = 0  # files removed
    bytes: int = 0  # bytes those files held


class GcReport(Record):
    """``loopx gc --json``."""

    schema_version: Literal[1] = 1
    dry_run: bool
    goals: list[GoalCollection]
    folded: int
    files: int
    bytes: int


# --- reading ------------------------------------------------------------------------------------


def _meta(journal: TurnJournal, *, terminal: bool) -> TurnMeta:
    return TurnMeta(
        seq=journal.seq,
        turn_key=journal.turn_key,
        terminal=terminal,
        ended_at=journal.ended_at or journal.turn_end,
        notable=notable(journal),
    )


def _candidates(
    paths: list[Path], policy: KeepPolicy, limit: int
) -> tuple[list[TurnMeta], dict[str, TurnJournal]]:
    """The journals that may be folded (all but the last ``keep_turns``), read in order.

    Reading stops at the first one that is not terminal or cannot be read.
    """
    metas: list[TurnMeta] = []
    journals: dict[str, TurnJournal] = {}
    for path in paths[: max(0, min(len(paths) - policy.keep_turns, limit))]:
        turn_key = path.name.removesuffix(".json")
        try:
            raw = read_bytes(path)
        except (OSError, LoopxError):
            break
        view = inspect(raw, goal_id=path.parent.parent.name, turn_key=turn_key)
        if view.recovery_decision is not RecoveryDecision.NONE:
            break
        journal = TurnJournal.model_validate_json(raw)
        journals[turn_key] = journal
        metas.append(_meta(journal, terminal=True))
    # The keep-turns rule counts every journal, so pad with the ones not read.
    pad = [TurnMeta(seq=0, turn_key="", terminal=False, ended_at=_NEVER, notable=False)]
    return metas + pad * (len(paths) - len(metas)), journals


def _kept_times(layout: Layout, goal_id: str) -> dict[str, datetime]:
    directory = layout.goal_dir(goal_id) / KEPT_DIR
    out: dict[str, datetime] = {}
    try:
        names = sorted(os.listdir(directory))
    except FileNotFoundError:
        return out
    for name in names:
        if parse_turn_key(name.removesuffix(".json")) is None or not name.endswith(".json"):
            continue
        try:
            journal = TurnJournal.model_validate_json(read_bytes(directory / name))
        except (OSError, LoopxError, ValueError):
            continue  # left for a human: doctor lists kept/ as it lists the rest
        out[journal.turn_key] = journal.ended_at or journal.turn_end
    return out


# --- the new checkpoint -------------------------------------------------------------------------


def _counts(previous: FoldedCounts, journals: list[TurnJournal]) -> FoldedCounts:
    statuses = Counter(previous.statuses)
    kinds = Counter(previous.kinds)
    for journal in journals:
        statuses[str(journal.status)] += 1
        if journal.result is not None and journal.failure is None:
            kinds[str(journal.result.kind)] += 1
    return FoldedCounts(
        turns=previous.turns + len(journals),
        statuses=dict(sorted(statuses.items())),
        kinds=dict(sorted(kinds.items())),
    )


def build_checkpoint(
    previous: Checkpoint | None,
    folded: list[TurnJournal],
    raw: list[bytes],
    *,
    window: timedelta,
    shifts: Sequence[ClockShift] = (),
) -> Checkpoint:
    """The checkpoint after folding ``folded`` (oldest first, their file bytes ``raw``). Pure.

    What replaying them after ``previous`` gives: the same fold replay runs
    (:mod:`loopx.turn.fold`). Ledger lines that ended within ``window`` of the
    newest folded turn stay in the checkpoint, since a quota window may still count them.
    """
    last = folded[-1]
    state = fold_state(previous.state if previous else None, folded, shifts)
    since = (last.ended_at or last.turn_end) - window
    spent = [r for j in folded if (r := spend_record(j)) is not None]
    ledger = [r for r in [*(previous.ledger if previous else []), *spent] if r.ended_at > since]
    return sealed(
        Checkpoint(
            goal_id=last.goal_id,
            through_seq=last.seq,
            through_turn_key=last.turn_key,
            state=state,
            ledger=ledger,
            folded=_counts(previous.folded if previous else FoldedCounts(), folded),
            journals_digest=chain_digest(previous.digest if previous else "", raw),
            through_at=last.ended_at or last.turn_end,
        )
    )


# --- one goal, then the root ---------------------------------------------------------------------


def _window(layout: Layout, goal_id: str) -> timedelta:
    try:
        return timedelta(hours=get_goal(layout, goal_id).quota.window_hours)
    except (LoopxError, OSError):
        return _DEFAULT_LEDGER_WINDOW


def _refold(layout: Layout, goal_id: str) -> None:
    """Rebuild the aggregate a ledger rewrite removed, under the lease; best effort (only a cache).

    Otherwise the next decision would rebuild it from the whole ledger, which
    keeps every line of ``keep_turns`` and ``keep_days``, not only the window's.
    """
    if layout.quota_aggregate_file(goal_id).exists():
        return  # the ledger was not rewritten: its aggregate is caught up by the next read
    try:
        refold_aggregate(layout, goal_id, window=_window(layout, goal_id))
    except (LoopxError, OSError) as e:
        log.warning("quota_aggregate_not_refolded", goal_id=goal_id, error=str(e))


def collect_goal(
    layout: Layout,
    goal_id: str,
    settings: RetentionSettings,
    *,
    now: datetime,
    dry_run: bool = False,
    limit: int = DEFAULT_TURNS_PER_GOAL,
) -> GoalCollection:
    """One gc pass over one goal (see the module docstring)."""
    policy = settings.for_goal(goal_id)
    try:
        checkpoint = read_checkpoint(layout, goal_id)
    except CorruptFileError as e:
        return GoalCollection(goal_id=goal_id, skipped=e.message)
    through = checkpoint.through_seq if checkpoint else 0
    every = journal_files(layout, goal_id)
    paths = [p for p in every if (k := parse_turn_key(p.name[:-5])) is None or k[1] > through]
    metas, journals = _candidates(paths, policy, limit)
    plan: FoldPlan = plan_fold(metas, _kept_times(layout, goal_id), policy, now=now, limit=limit)
    leftovers = unsettled(layout, checkpoint, every)
    if plan.empty and not leftovers:
        return GoalCollection(goal_id=goal_id, through_seq=through or None)
    if dry_run:
        return _dry(layout, goal_id, plan, through)
    claimed = claim(layout, goal_id, agent_id=GC_AGENT_ID, now=now)
    if claimed.lease is None:
        holder = claimed.blocking.agent_id if claimed.blocking else "a damaged lease"
        return GoalCollection(goal_id=goal_id, skipped=f"leased by {holder}")
    tally = Tally()
    try:
        with fence_of(layout, claimed.lease).held():
            if leftovers and checkpoint is not None:
                tally = settle(layout, checkpoint, policy, now=now)
            if plan.folded:
                folded = [journals[m.turn_key] for m in plan.folded]
                raw = [
                    read_bytes(layout.turns_dir(goal_id) / f"{m.turn_key}.json")
                    for m in plan.folded
                ]
                fault_point("gc:before_checkpoint")
                checkpoint = build_checkpoint(
                    checkpoint,
                    folded,
                    raw,
                    window=_window(layout, goal_id),
                    shifts=read_shifts(layout, goal_id),
                )
                atomic_write_model(layout.goal_dir(goal_id) / CHECKPOINT_NAME, checkpoint)
                fault_point("gc:checkpoint_written")
                more = settle(layout, checkpoint, policy, now=now)
                tally.files, tally.bytes = tally.files + more.files, tally.bytes + more.bytes
                tally.kept += more.kept
            expire(layout, goal_id, plan.expired, tally)
            _refold(layout, goal_id)
    finally:
        release(layout, claimed.lease)
    note_goal_changed(layout, goal_id)
    log.info(
        "goal_compacted",
        goal_id=goal_id,
        folded=len(plan.folded),
        through_seq=checkpoint.through_seq if checkpoint else None,
        files=tally.files,
    )
    return GoalCollection(
        goal_id=goal_id,
        through_seq=checkpoint.through_seq if checkpoint else None,
        folded=len(plan.folded),
        kept=tally.kept,
        expired=len(plan.expired),
        files=tally.files,
        bytes=tally.bytes,
    )


def _dry(
    layout: Layout,
    goal_id: str,
    plan: FoldPlan,
    through: int,
) -> GoalCollection:
    files = size = kept = 0
    for meta in plan.folded:
        if meta.turn_key in plan.kept:
            kept += 1
            continue
        for path in [
            layout.turns_dir(goal_id) / f"{meta.turn_key}.json",
            *_run_logs_of(layout, goal_id, meta.seq),
        ]:
            try:
                size += path.lstat().st_size
                files += 1
            except FileNotFoundError:
                continue
    return GoalCollection(
        goal_id=goal_id,
        through_seq=plan.through_seq or (through or None),
        folded=len(plan.folded),
        kept=kept,
        expired=len(plan.expired),
        files=files,
        bytes=size,
    )


def _run_logs_of(layout: Layout, goal_id: str, seq: int) -> list[Path]:
    runs = layout.runs_dir(goal_id)
    return [runs / f"{seq}.json", runs / f"{seq}.md"]


def goal_ids(layout: Layout) -> list[str]:
    """Every goal directory's name, sorted (gc visits them in this order)."""
    try:
        names = os.listdir(layout.goals_dir)
    except FileNotFoundError:
        return []
    return sorted(n for n in names if is_valid_goal_id(n))


def collect(
    layout: Layout,
    *,
    now: datetime,
    dry_run: bool = False,
    goals: list[str] | None = None,
    limit: int = DEFAULT_TURNS_PER_GOAL,
) -> GcReport:
    """One gc pass over ``goals`` (default: every goal of the root)."""
    settings = load_settings(layout)
    done = [
        collect_goal(layout, goal_id, settings, now=now, dry_run=dry_run, limit=limit)
        for goal_id in (goals if goals is not None else goal_ids(layout))
        if layout.goal_dir(goal_id).is_dir()
    ]
    return GcReport(
        dry_run=dry_run,
        goals=done,
        folded=sum(g.folded for g in done),
        files=sum(g.files for g in done),
        bytes=sum(g.bytes for g in done),
    )


__all__ = [
    "GC_AGENT_ID",
    "GcReport",
    "GoalCollection",
    "build_checkpoint",
    "collect",
    "collect_goal",
    "goal_ids",
    "settle",
]
