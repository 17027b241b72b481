"""Settling a fold: remove (or move to ``kept/``) what a goal's checkpoint replaces.

Everything here is derived from the checkpoint alone and is idempotent: the
journals and run logs of folded turns go (those of turns that failed or
opened a gate move to ``kept/`` while ``keep_failed_days`` holds), and
``history.jsonl`` and ``quota.jsonl`` are rewritten without the folded lines.
A kill at any fault point leaves files the next pass settles the same way.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

from loopx.errors import LoopxError
from loopx.faults import fault_point
from loopx.retention.policy import KeepPolicy
from loopx.root import Layout
from loopx.storage.dirs import ensure_dir, fsync_dir
from loopx.storage.files import atomic_write_bytes, read_bytes
from loopx.turn.checkpoint import KEPT_DIR, Checkpoint
from loopx.turn.journal import TurnJournal, journal_files, parse_turn_key
from loopx.turn.outcome import ResultKind


def notable(journal: TurnJournal) -> bool:
    """Whether a turn failed (not merely stopped) or asked a human: kept for longer."""
    if journal.failure is not None:
        return str(journal.failure.reason) != "stopped"
    return journal.result is not None and journal.result.kind in (
        ResultKind.FAILED,
        ResultKind.NEEDS_HUMAN,
    )


class Tally:
    """Files and bytes a settle removed, and records it kept."""

    def __init__(self) -> None:
        self.files = 0
        self.bytes = 0
        self.kept = 0

    def remove(self, path: Path) -> None:
        """Remove one file (gone already: nothing to count)."""
        try:
            size = path.lstat().st_size
            path.unlink()
        except FileNotFoundError:
            return
        self.files += 1
        self.bytes += size


def run_logs(layout: Layout, goal_id: str, through: int) -> list[Path]:
    """The goal's run log files (``runs/<seq>.json``, ``.md``) of turns up to ``through``."""
    runs = layout.runs_dir(goal_id)
    try:
        names = os.listdir(runs)
    except FileNotFoundError:
        return []
    out = []
    for name in sorted(names):
        stem = name.split(".", 1)[0]
        if stem.isdigit() and int(stem) <= through and not name.startswith("."):
            out.append(runs / name)
    return out


def _keep_longer(journal: TurnJournal, policy: KeepPolicy, now: datetime) -> bool:
    ended = journal.ended_at or journal.turn_end
    return notable(journal) and ended >= now - timedelta(days=policy.keep_failed_days)


def _filtered_lines(data: bytes, through: int, head: list[bytes]) -> bytes:
    """``head`` then the complete lines of ``data`` whose turn is after ``through``."""
    body = [
        line + b"\n"
        for line in data.split(b"\n")[:-1]
        if line.strip() and _line_seq(line) > through
    ]
    return b"".join([*head, *body])


def _line_seq(line: bytes) -> int:
    parsed = parse_turn_key(_turn_key_of(line))
    return parsed[1] if parsed is not None else 1 << 62  # unreadable: never dropped here


def _turn_key_of(line: bytes) -> str:
    start = line.find(b'"turn_key":"')
    if start < 0:
        return ""
    start += len(b'"turn_key":"')
    return line[start : line.find(b'"', start)].decode(errors="replace")


def settle(layout: Layout, checkpoint: Checkpoint, policy: KeepPolicy, *, now: datetime) -> Tally:
    """Remove (or move to kept/) everything of the turns ``checkpoint`` folds. Idempotent."""
    goal_id, through = checkpoint.goal_id, checkpoint.through_seq
    tally = Tally()
    kept_dir = layout.goal_dir(goal_id) / KEPT_DIR
    for path in journal_files(layout, goal_id):
        parsed = parse_turn_key(path.name.removesuffix(".json"))
        if parsed is None or parsed[1] > through:
            continue
        try:
            journal = TurnJournal.model_validate_json(read_bytes(path))
        except (LoopxError, ValueError):
            journal = None
        if journal is not None and _keep_longer(journal, policy, now):
            ensure_dir(kept_dir)
            for run in run_logs(layout, goal_id, journal.seq):
                if run.name.split(".", 1)[0] == str(journal.seq):
                    os.replace(run, kept_dir / run.name)
            os.replace(path, kept_dir / path.name)
            fsync_dir(kept_dir)
            tally.kept += 1
            fault_point("gc:kept_moved")
            continue
        tally.remove(path)
    fsync_dir(layout.turns_dir(goal_id))
    fault_point("gc:journals_removed")
    for run in run_logs(layout, goal_id, through):
        tally.remove(run)
    fsync_dir(layout.runs_dir(goal_id))
    fault_point("gc:runs_removed")
    _rewrite(layout.history_file(goal_id), through, [], tally)
    fault_point("gc:history_rewritten")
    head = [r.model_dump_json().encode() + b"\n" for r in checkpoint.ledger]
    # The aggregate caches the ledger's prefix: it goes before and after a rewrite, so no
    # reader keeps one of the old ledger (an unchanged ledger keeps its cache).
    aggregate = layout.quota_aggregate_file(goal_id)
    _rewrite(layout.quota_file(goal_id), through, head, tally, before=aggregate.unlink)
    return tally


def _rewrite(
    path: Path,
    through: int,
    head: list[bytes],
    tally: Tally,
    *,
    before: Callable[..., None] | None = None,
) -> None:
    try:
        data = read_bytes(path)
    except FileNotFoundError:
        return
    new = _filtered_lines(data, through, head)
    if new != data[: data.rfind(b"\n") + 1]:
        if before is not None:
            before(missing_ok=True)
        atomic_write_bytes(path, new)
        if before is not None:
            before(missing_ok=True)
        tally.bytes += max(len(data) - len(new), 0)


def expire(layout: Layout, goal_id: str, expired: tuple[str, ...], tally: Tally) -> None:
    """Remove the kept records (journal and run logs) of ``expired`` turn keys."""
    kept_dir = layout.goal_dir(goal_id) / KEPT_DIR
    for turn_key in expired:
        parsed = parse_turn_key(turn_key)
        tally.remove(kept_dir / f"{turn_key}.json")
        if parsed is not None:
            tally.remove(kept_dir / f"{parsed[1]}.json")
            tally.remove(kept_dir / f"{parsed[1]}.md")
    if expired:
        fsync_dir(kept_dir)


def unsettled(layout: Layout, checkpoint: Checkpoint | None, paths: list[Path]) -> bool:
    """Whether something the checkpoint replaces is still there (a pass was interrupted).

    ``paths``: the goal's journal files.
    """
    if checkpoint is None:
        return False
    through = checkpoint.through_seq
    if any((p := parse_turn_key(x.name.removesuffix(".json"))) and p[1] <= through for x in paths):
        return True
    if run_logs(layout, checkpoint.goal_id, through):
        return True
    ledger_keys = {r.turn_key for r in checkpoint.ledger}
    for path, keep in (
        (layout.history_file(checkpoint.goal_id), set[str]()),
        (layout.quota_file(checkpoint.goal_id), ledger_keys),
    ):
        try:
            data = read_bytes(path)
        except FileNotFoundError:
            continue
        for line in data.split(b"\n")[:-1]:
            if _line_seq(line) > through:
                break
            if _turn_key_of(line) not in keep:
                return True
    return False


__all__ = ["Tally", "expire", "notable", "run_logs", "settle", "unsettled"]
