"""Gather select's inputs from the runtime root: the I/O edge of :mod:`loopx.schedule.select`."""

from __future__ import annotations

import socket
import threading
from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import TypeVar

from loopx.accounts.accountfiles import HeldAccount, held_account
from loopx.accounts.accountstore import refused_by_account
from loopx.accounts.handoff import accounts_of, handoffs_in_window
from loopx.accounts.records import account_of
from loopx.accounts.rollingbudget import ROOT_BUDGET
from loopx.accounts.rules import account_admits, admit
from loopx.errors import CorruptFileError, LoopxError
from loopx.log import get_logger
from loopx.model import Record
from loopx.quota.decision import QuotaDecision, should_run
from loopx.quota.headroom import HostHeadroom, measure_headroom
from loopx.quota.ledger import window_spend
from loopx.registry.catalog import goal_catalog
from loopx.registry.goalrecords import Goal, GoalStatus, Registry
from loopx.registry.store import ensure_current
from loopx.root import Layout
from loopx.schedule.select import Candidate
from loopx.state import GoalState
from loopx.storage.files import parse_model, read_bytes
from loopx.turn.damagedlease import damaged_lease_blocks_until
from loopx.turn.lease import (
    holder_state,
    lease_grace_s,
    lease_ttl_s,
    read_lease,
    takeover_allowed,
)
from loopx.turn.workdir import waits_on_live_hold

log = get_logger(__name__)

R = TypeVar("R", bound=Record)

# path -> (the bytes last parsed, the frozen record they gave). Every agent step
# reads the registry and each active goal's state; most of the time neither
# changed, and comparing bytes is much cheaper than validating them again.
_PARSED: dict[tuple[Path, type[Record]], tuple[bytes, Record]] = {}
_PARSED_LOCK = threading.Lock()
_PARSED_MAX = 4096


def read_record_cached(path: Path, model: type[R]) -> R | None:
    """Read and validate ``path`` like :func:`loopx.storage.files.read_model`, reusing the last parse.

    The file is always read; it is validated again only when its bytes
    changed, so the answer is exactly what a fresh read would give. Only for
    frozen records that callers do not mutate.

    Returns:
        The record, or None when the file does not exist.

    Raises:
        CorruptFileError: not JSON, or not the model's schema.

    """
    try:
        data = read_bytes(path)
    except FileNotFoundError:
        return None
    key = (path, model)
    hit = _PARSED.get(key)
    if hit is not None and hit[0] == data:
        return hit[1]  # type: ignore[return-value]  # keyed by model: always an R
    record = parse_model(path, model, data)
    with _PARSED_LOCK:
        if len(_PARSED) >= _PARSED_MAX:
            _PARSED.clear()
        _PARSED[key] = (data, record)
    return record


def read_goal_cached(layout: Layout, goal_id: str) -> Goal | None:
    """The goal's policy (None when unregistered), its file parsed again only when it changed.

    Raises:
        CorruptFileError: the goal file is damaged or names another goal.

    """
    ensure_current(layout)
    goal = read_record_cached(layout.goal_file(goal_id), Goal)
    if goal is not None and goal.id != goal_id:
        raise CorruptFileError(
            layout.goal_file(goal_id), f"id: the file names goal {goal.id!r}, not {goal_id!r}"
        )
    return goal


def _read_state(layout: Layout, goal_id: str) -> GoalState:
    return read_record_cached(layout.state_file(goal_id), GoalState) or GoalState(goal_id=goal_id)


def lease_expiry(layout: Layout, goal_id: str, *, now: datetime) -> datetime | None:
    """Until when a live holder leases the goal, or None when a claim could succeed now.

    A holder SIGKILLed mid-turn leaves an unexpired lease; counting it as free
    lets the next claim take it over (and recover the turn) at once instead
    of after the expiry. :func:`loopx.turn.lease.claim` re-checks under the goal's
    lock, with the same rules: the lease settings and, for a lease file that
    cannot be read, :func:`loopx.turn.damagedlease.damaged_lease_free_at`.
    """
    grace_s = lease_grace_s()
    try:
        lease = read_lease(layout, goal_id)
    except CorruptFileError:
        return damaged_lease_blocks_until(
            layout.lease_file(goal_id), now=now, ttl_s=lease_ttl_s(), grace_s=grace_s
        )
    if lease is None:
        return None
    holder = holder_state(lease, hostname=socket.gethostname())
    if takeover_allowed(lease, holder, now=now, grace_s=grace_s):
        return None
    return max(lease.expires_at + timedelta(seconds=grace_s), now + timedelta(seconds=1))


def candidate_of(
    layout: Layout, goal: Goal, *, now: datetime, headroom: HostHeadroom | None = None
) -> Candidate:
    """Read one goal's select inputs (state, lease, quota decision).

    Raises:
        LoopxError: a file of the goal is damaged or a lock timed out.

    """
    return candidate_and_decision(layout, goal, now=now, headroom=headroom)[0]


def candidate_and_decision(
    layout: Layout,
    goal: Goal,
    *,
    now: datetime,
    headroom: HostHeadroom | None = None,
    account: HeldAccount | None = None,
    root: HeldAccount | None = None,
) -> tuple[Candidate, QuotaDecision]:
    """:func:`candidate_of`, with the quota decision it was made from (its next eligible time).

    The decision is :func:`loopx.quota.decision.decide`'s, from the state read here
    (not read twice) and ``headroom`` (measured now when not given).

    Raises:
        LoopxError: a file of the goal is damaged or a lock timed out.

    """
    state = _read_state(layout, goal.id)
    leased_until = lease_expiry(layout, goal.id, now=now)
    # Waiting for another goal's turn in its workdir: passed over, never claimed, until
    # that turn's release removes the wait note and hints the goal.
    busy_until = waits_on_live_hold(layout, goal.id, now=now, grace_s=lease_grace_s())
    spend = window_spend(layout, goal.id, window_start=goal.quota.window_start(now))
    room = headroom if headroom is not None else measure_headroom(now=now)
    decision = should_run(goal, state, spend, room, leased=False, now=now)
    # A parked account holds its goals until its reset: the index's timer wakes
    # them then, and an idle poll costs them nothing before.
    decision = held_by_account(
        layout,
        goal,
        decision,
        now=now,
        account=account,
        root=root,
        handed_off_at=state.handed_off_at,
    )
    candidate = Candidate(
        goal=goal,
        open_gates=len(state.open_gates),
        next_eligible_at=state.eligible_at(now),
        leased_until=leased_until,
        workdir_busy_until=busy_until,
        quota_allowed=decision.allowed,
        spent_wall_s=decision.spent_wall_s,
    )
    return candidate, decision


def held_by_account(
    layout: Layout,
    goal: Goal,
    decision: QuotaDecision,
    *,
    now: datetime,
    account: HeldAccount | None = None,
    root: HeldAccount | None = None,
    handed_off_at: Sequence[datetime] = (),
) -> QuotaDecision:
    """``decision``, or the refusal of the root's budget or the goal's account when they hold it.

    A goal whose own account holds it but a fallback account admits it is not
    held (``handed_off_at``: its recent hand-offs, for its cap).

    ``account`` and ``root``: the states and policies as the caller last read
    them (read here when not given); an account with a damaged file holds its goals.

    Raises:
        LoopxError: an account file cannot be opened (a bad name, an unsafe path).
    """
    if not decision.allowed:
        return decision
    name = account_of(goal.account, goal.host.kind)
    for held in (root or held_account(layout, ROOT_BUDGET), account or held_account(layout, name)):
        admission = admit(held.state, goal.id, now=now, policy=held.policy, priority=goal.priority)
        if not admission.allowed:
            if (
                held.state.name == name
                and not account_admits(  # parked, not a probe's wait
                    held.state, goal.id, now=now, policy=held.policy, priority=goal.priority
                )
                and _fallback_admits(layout, goal, handed_off_at, now=now)
            ):
                return decision  # the hand-off step runs it on that fallback
            return refused_by_account(decision, admission)
    return decision


def _fallback_admits(
    layout: Layout, goal: Goal, handed_off_at: Sequence[datetime], *, now: datetime
) -> bool:
    """Whether a fallback account would take the goal on now (its hand-off cap not reached)."""
    cap = goal.max_handoffs_per_day
    if not goal.handoff or (cap is not None and handoffs_in_window(handed_off_at, now=now) >= cap):
        return False
    return any(
        account_admits(held.state, goal.id, now=now, policy=held.policy, priority=goal.priority)
        for held in (held_account(layout, other) for other in accounts_of(goal)[1:])
    )


def gather_candidates(
    layout: Layout, *, now: datetime, registry: Registry | None = None
) -> list[Candidate]:
    """Select inputs of every active goal; a goal whose files cannot be read is skipped (logged).

    Goals that are not active are left out: they can never be selected, and
    reading their files would cost time on every idle poll.
    """
    if registry is None:
        catalog = goal_catalog(layout, persist=False)
        catalog.refresh(now=now)
        registry = catalog.registry()
    reg = registry
    out: list[Candidate] = []
    headroom: HostHeadroom | None = None  # one measurement serves every goal of this step
    for goal in reg.goals.values():
        if goal.status is not GoalStatus.ACTIVE:
            continue
        try:
            headroom = headroom or measure_headroom(now=now)
            out.append(candidate_of(layout, goal, now=now, headroom=headroom))
        except LoopxError as e:
            log.warning("candidate_unreadable", goal_id=goal.id, error=e.message)
    return out
