"""``durable_writeback``: a turn's run log, history line and state patch, each idempotent.

Everything written here is derived from the journal alone (no clock, no
process), so a replay after a crash writes the same bytes again:

* ``runs/<seq>.json`` and ``runs/<seq>.md`` are rewritten atomically with the
  same content. They are a rendering of the journal, so they are not fsynced:
  the terminal journal is, and :func:`restore_run_log` writes a run log again
  that a power cut lost (the next claim of the goal, and ``loopx recover``);
* the history line is keyed by ``turn_key`` (:func:`loopx.storage.files.append_record`
  skips a repeat);
* the state patch is applied only if ``state.turn_seq`` is below the turn's
  seq, and that bump is written in the same atomic rewrite as the patch.

The state is written last, so a state that names a turn implies its history
line exists, and its run log once a power cut's loss was restored.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from loopx.accounts.handoff import HANDOFF_TIMES_KEPT, HANDOFF_WINDOW
from loopx.accounts.records import account_of
from loopx.donecheck import NEXT_ACTION as CHECK_NEXT_ACTION
from loopx.donecheck import LastCheck
from loopx.errors import CorruptFileError
from loopx.faults import fault_point
from loopx.log import get_logger
from loopx.root import Layout
from loopx.state import GoalState, Todo, load_state, update_state
from loopx.storage.dirs import ensure_dir
from loopx.storage.files import atomic_write_bytes, atomic_write_model
from loopx.storage.jsonl import append_record
from loopx.turn.historyline import history_line
from loopx.turn.journal import Phase, TurnJournal, parse_turn_key, read_journal
from loopx.turn.runlog import render_markdown, run_report

log = get_logger(__name__)


def _upsert_todos(todos: list[Todo], changes: list[Todo]) -> list[Todo]:
    by_id = {t.id: t for t in todos}
    order = [t.id for t in todos]
    for todo in changes:
        if todo.id not in by_id:
            order.append(todo.id)
        by_id[todo.id] = todo
    return [by_id[i] for i in order]


def apply_patch(state: GoalState, journal: TurnJournal) -> GoalState:
    """The state after the turn's writeback; unchanged if it was applied already. Pure."""
    if state.turn_seq >= journal.seq:
        return state
    update: dict[str, object] = {
        "last_applied_turn_key": journal.turn_key,
        "turn_seq": journal.seq,
        "updated_at": journal.turn_end,
    }
    result = journal.result
    if journal.failure is None and result is not None:
        patch = result.state_patch
        if patch.beliefs:
            update["beliefs"] = [*state.beliefs, *patch.beliefs]
        if patch.priorities is not None:
            update["priorities"] = list(patch.priorities)
        if patch.non_goals is not None:
            update["non_goals"] = list(patch.non_goals)
        if patch.todos:
            update["todos"] = _upsert_todos(state.todos, patch.todos)
        if result.next_action is not None:
            update["next_action"] = result.next_action
    if journal.outcome is not None and journal.outcome.session is not None:
        update.update(_session_fields(journal))
    update.update(_handoff_fields(state, journal))
    if journal.check is not None:
        update.update(_check_fields(state, journal, next_action_given="next_action" in update))
    return state.model_copy(update=update)


def _handoff_fields(state: GoalState, journal: TurnJournal) -> dict[str, object]:
    """A handed-off turn counted: in all, and its time among the last 24 hours'. Pure."""
    handoff = journal.plan.handoff
    if handoff is None:
        return {}
    start = handoff.decided_at - HANDOFF_WINDOW
    recent = [at for at in state.handed_off_at if at > start]
    return {
        "handoffs": state.handoffs + 1,
        "handed_off_at": [*recent, handoff.decided_at][-HANDOFF_TIMES_KEPT:],
    }


def _session_fields(journal: TurnJournal) -> dict[str, object]:
    """The session to keep, named by its account. Pure.

    A handed-off turn's session is not kept: the goal's own session stays for
    its return, and the next hand-off starts fresh with the state carried.
    """
    assert journal.outcome is not None  # noqa: S101 - the caller checked
    session = journal.outcome.session
    if session is None or journal.plan.handoff is not None:
        return {}
    account = account_of(journal.plan.account, journal.plan.host_kind)
    return {"host_session": session.model_copy(update={"account": account})}


def _check_fields(
    state: GoalState, journal: TurnJournal, *, next_action_given: bool
) -> dict[str, object]:
    """The recorded check, which the next envelope shows the host. Pure."""
    assert journal.check is not None  # noqa: S101 - the caller checked
    out: dict[str, object] = {"last_check": LastCheck.of(journal.turn_key, journal.check)}
    if journal.check.passed and not next_action_given and state.next_action == CHECK_NEXT_ACTION:
        out["next_action"] = None  # the check's own request is met
    return out


def durable_writeback(
    layout: Layout, journal: TurnJournal, *, then: Callable[[GoalState], GoalState] | None = None
) -> None:
    """Write the run log, append the history line, apply the state patch.

    ``then`` further changes the patched state in the same write (the turn
    passes the scheduler's pure ``schedule``, so a turn writes its state once).

    The caller holds the turn's fence. Fault points ``writeback:run_json``,
    ``writeback:run_md`` and ``writeback:history`` sit between the files.
    """
    _write_run_log(layout, journal, durable=False)
    append_record(layout.history_file(journal.goal_id), history_line(journal))
    fault_point("writeback:history")
    _write_state_if_changed(layout, journal, then)


def _write_run_log(layout: Layout, journal: TurnJournal, *, durable: bool) -> None:
    runs = ensure_dir(layout.runs_dir(journal.goal_id))
    report = run_report(journal)
    atomic_write_model(runs / f"{journal.seq}.json", report, durable=durable)
    fault_point("writeback:run_json")
    atomic_write_bytes(
        runs / f"{journal.seq}.md", render_markdown(report).encode(), durable=durable
    )
    fault_point("writeback:run_md")


def restore_run_log(layout: Layout, journal_file: Path) -> bool:
    """Write the run log of the turn ``journal_file`` records again if it is missing or empty.

    The run log is written without fsync, so a power cut after the turn may
    leave its files gone or empty beside a durable terminal journal. Costs two
    ``stat`` calls when the files are there. Returns whether it wrote them.
    """
    parsed = parse_turn_key(journal_file.name.removesuffix(".json"))
    if parsed is None:
        return False
    runs = layout.runs_dir(parsed[0])
    if all(_not_empty(runs / f"{parsed[1]}{suffix}") for suffix in (".json", ".md")):
        return False
    try:
        journal = read_journal(journal_file)
    except (FileNotFoundError, CorruptFileError):
        return False  # recovery quarantines a damaged journal; a gone one has nothing to give
    if not journal.done(Phase.DURABLE_WRITEBACK):
        return False  # its writeback has not run: it writes the run log itself
    _write_run_log(layout, journal, durable=True)
    log.warning("run_log_restored", goal_id=journal.goal_id, turn_key=journal.turn_key)
    return True


def _not_empty(path: Path) -> bool:
    try:
        return os.stat(path).st_size > 0
    except FileNotFoundError:
        return False


def _write_state_if_changed(
    layout: Layout, journal: TurnJournal, then: Callable[[GoalState], GoalState] | None
) -> None:
    current = load_state(layout, journal.goal_id)
    if current.turn_seq >= journal.seq:
        return  # a replay: applied already, write nothing

    def change(state: GoalState) -> GoalState:
        patched = apply_patch(state, journal)
        return then(patched) if then is not None else patched

    update_state(layout, journal.goal_id, change)
