"""A goal's lease, fencing epoch and turn journals."""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from loopx.doctor.findings import Checker, FindingCode, Severity, q
from loopx.errors import CorruptFileError, UnsafePathError
from loopx.model import iso_utc
from loopx.storage.files import read_bytes
from loopx.turn.fencing import read_epoch
from loopx.turn.inspection import RecoveryDecision, inspect
from loopx.turn.journal import TurnJournal, parse_turn_key
from loopx.turn.lease import (
    DEFAULT_GRACE_S,
    Holder,
    Lease,
    holder_state,
    lease_grace_s,
)


def lease_problem(
    lease: Lease, holder: Holder, *, now: datetime, grace_s: float = DEFAULT_GRACE_S
) -> str | None:
    """Why a lease is stale, or None when its holder may still be working. Pure."""
    if holder is Holder.DEAD:
        return f"held by {lease.agent_id} (pid {lease.pid}), which is no longer running"
    if holder is Holder.UNKNOWN and now > lease.expires_at + timedelta(seconds=grace_s):
        return (
            f"held by {lease.agent_id} on host {lease.hostname}, expired at "
            f"{iso_utc(lease.expires_at)} and not renewed since"
        )
    return None


def check_lease_and_journals(doc: Checker, goal_id: str) -> list[TurnJournal]:  # noqa: C901 - one branch per journal outcome
    """Check the lease, the epoch and every journal; return the finished journals."""
    layout = doc.layout
    epoch_path = layout.epoch_file(goal_id)
    try:
        epoch: int | None = read_epoch(layout, goal_id)
    except (CorruptFileError, UnsafePathError) as e:
        epoch = None
        doc.add(Severity.ERROR, FindingCode.SCHEMA, epoch_path, str(e), "", goal_id)
    lease_path = layout.lease_file(goal_id)
    lease = doc.model(
        lease_path,
        Lease,
        f"rm {q(lease_path)}  (a damaged lease belongs to nobody; the next claim replaces it)",
        severity=Severity.WARNING,
        goal_id=goal_id,
    )
    live = False
    if isinstance(lease, Lease):
        holder = holder_state(lease, hostname=doc.hostname)
        stale = lease_problem(lease, holder, now=doc.now, grace_s=lease_grace_s())
        live = stale is None
        if stale is not None:
            doc.add(
                Severity.WARNING,
                FindingCode.STALE_LEASE,
                lease_path,
                stale,
                "loopx recover  (clears a dead holder's lease and finishes its turn)",
                goal_id,
            )
    high = lease.epoch if isinstance(lease, Lease) else 0
    finished: list[TurnJournal] = []
    turns = layout.turns_dir(goal_id)
    names = sorted(os.listdir(turns)) if turns.is_dir() and not turns.is_symlink() else []
    for name in names:
        path = turns / name
        if name.startswith(".") or path.is_symlink() or not path.is_file():
            continue
        if not name.endswith(".json"):
            doc.add(
                Severity.WARNING,
                FindingCode.UNEXPECTED_ENTRY,
                path,
                "not a turn journal",
                f"move it out of {q(turns)}",
                goal_id,
            )
            continue
        doc.journals += 1
        turn_key = name.removesuffix(".json")
        parsed = parse_turn_key(turn_key)
        high = max(high, parsed[2] if parsed else 0)
        raw = read_bytes(path)
        view = inspect(raw, goal_id=goal_id, turn_key=turn_key)
        if view.recovery_decision is RecoveryDecision.NONE:
            finished.append(TurnJournal.model_validate_json(raw))
        elif view.recovery_decision is RecoveryDecision.QUARANTINE:
            doc.add(
                Severity.ERROR,
                FindingCode.INVALID_JOURNAL,
                path,
                "; ".join(f"{v.code}: {v.message}" for v in view.violations),
                "loopx recover  (moves it to quarantine/ with a reason file)",
                goal_id,
            )
        elif not live and view.recovery_decision is RecoveryDecision.RETRY_HOST:
            # `loopx recover` leaves such a journal in_progress on purpose (running a host
            # needs an agent), so advising it again looped.
            doc.add(
                Severity.INFO,
                FindingCode.ORPHANED_JOURNAL,
                path,
                "in_progress, its host interrupted: the next agent to claim the goal runs "
                "the host again under the same turn key (retry pending)",
                f"loopx turn run-once {q(goal_id)}  (or start the supervisor)",
                goal_id,
            )
        elif not live:
            doc.add(
                Severity.WARNING,
                FindingCode.ORPHANED_JOURNAL,
                path,
                f"in_progress at {view.next_phase or 'host_execute'} and no live agent "
                f"holds the goal (recovery would {view.recovery_decision})",
                "loopx recover  (or start the supervisor, which recovers first)",
                goal_id,
            )
    if epoch is not None and high > epoch:
        doc.add(
            Severity.ERROR,
            FindingCode.EPOCH,
            epoch_path,
            f"the fencing counter is {epoch} but a lease or journal carries epoch {high}; "
            "a stale holder's writes would not be refused",
            f"printf '{high}\\n' > {q(epoch_path)}",
            goal_id,
        )
    return finished
