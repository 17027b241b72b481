"""One whole turn of one goal: claim, finish leftovers, quota, journal, host, phases, release.

:func:`attempt_turn` is what the agent loop calls (``loopx turn run-once``
prints its reasons when no turn ran); :func:`run_one_turn` is the same
returning only the report. The host run and the phases after it are
:func:`loopx.agents.execution.execute`.

A claim first finishes the goal's unfinished journal, if any (a turn never
starts while an older one is open):

* resumable (the host finished): its phases are completed from the journal;
  then this call goes on to a new turn if the quota allows;
* waiting for a host retry (``retry_host``): this call's turn *is* that retry:
  the host runs again under the old journal and turn key with ``attempt`` + 1.
  Before that, and after any takeover, every process still carrying the
  goal's ``LOOPX_GOAL_ID`` under this root is killed: fencing stops a stale
  holder's writes, this stops its host.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

import structlog

from loopx import __version__, environ
from loopx.accounts.files import load_account
from loopx.accounts.model import Account, account_of
from loopx.accounts.rules import OVERLOADS_FOR_GATE
from loopx.accounts.store import admit_turn, refused_by_account
from loopx.agents.console import AgentConsole
from loopx.agents.execution import HostTerms, execute, finish_checked
from loopx.agents.hostrun import DEFAULT_KILL_GRACE_S
from loopx.agents.hosts import Host
from loopx.agents.merging import auto_merge
from loopx.agents.worktrees import goal_in_worktree
from loopx.clock import calibrate
from loopx.dropbox import result_path
from loopx.errors import (
    CorruptFileError,
    GoalNotFoundError,
    LeaseLostError,
    resource_fault,
)
from loopx.ids import validate_goal_id
from loopx.log import get_logger
from loopx.model import utcnow
from loopx.process import find_by_env, kill_tree
from loopx.quota.decision import QuotaDecision, decide
from loopx.registry.model import Goal
from loopx.root import Layout
from loopx.schedule.candidates import read_goal_cached
from loopx.state import load_state
from loopx.storage.files import dir_sync_batch
from loopx.storage.locks import lock_busy
from loopx.turn.attempt import TurnAttempt, TurnReport
from loopx.turn.failures import FailureReason, TurnFailure
from loopx.turn.journal import (
    TurnJournal,
    TurnPlan,
    create_journal,
    last_seq,
    make_turn_key,
    newest_journal,
    write_journal,
)
from loopx.turn.lease import (
    DEFAULT_GRACE_S,
    DEFAULT_TTL_S,
    Fence,
    Lease,
    claim,
    fence_of,
    holder_state,
    lease_grace_s,
    lease_ttl_s,
    read_lease,
    release,
    renew,
    takeover_allowed,
)
from loopx.turn.outcome import TurnStatus
from loopx.turn.protocol import Envelope
from loopx.turn.recovery import RecoveryAction, recover_goal
from loopx.turn.workdir import (
    WorkdirClaim,
    acquire_workdir,
    note_waiting,
    release_workdir,
    turn_workdir,
)

log = get_logger(__name__)


@dataclass(frozen=True, slots=True)
class TurnConfig:
    """Timing knobs of a turn (lease TTL and grace, kill grace)."""

    lease_ttl_s: float = DEFAULT_TTL_S
    lease_grace_s: float = DEFAULT_GRACE_S
    kill_grace_s: float = DEFAULT_KILL_GRACE_S

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> TurnConfig:
        """Read ``LOOPX_LEASE_TTL_S``, ``LOOPX_LEASE_GRACE_S``, ``LOOPX_KILL_GRACE_S``."""
        return cls(
            lease_ttl_s=lease_ttl_s(env),
            lease_grace_s=lease_grace_s(env),
            kill_grace_s=environ.seconds(environ.KILL_GRACE_S, DEFAULT_KILL_GRACE_S, env),
        )


def run_one_turn(
    layout: Layout,
    goal_id: str,
    *,
    agent_id: str,
    stop: threading.Event | None = None,
    config: TurnConfig | None = None,
) -> TurnReport | None:
    """Run one turn of ``goal_id``.

    Returns:
        The finished turn's report, or None when the goal could not be claimed
        (a live holder), the quota refused, or ``stop`` was set before a host
        started. Use :func:`attempt_turn` to learn which.

    Raises:
        GoalNotFoundError: no such goal.
        LoopxError: a damaged file or a lock timeout.

    """
    return attempt_turn(layout, goal_id, agent_id=agent_id, stop=stop, config=config).report


# Goals whose turn this process runs now (the API may run turns from several threads).
_IN_FLIGHT: set[str] = set()


def attempt_turn(
    layout: Layout,
    goal_id: str,
    *,
    agent_id: str,
    stop: threading.Event | None = None,
    config: TurnConfig | None = None,
    skip_if_busy: bool = False,
    console: AgentConsole | None = None,
    host: Host | None = None,
    on_turn: Callable[[str, datetime], None] | None = None,
) -> TurnAttempt:
    """Like :func:`run_one_turn`, saying why no turn ran.

    ``on_turn(turn_key, started_at)`` is called once the turn's journal exists
    (a new turn, or a retried one), before its host runs: the agent's heartbeat
    shows it.

    ``skip_if_busy``: when the goal's lock is held right now (another agent is
    claiming it or writing its turn), return at once (``busy``) instead of
    waiting for the lock only to find the goal leased; the agent loop tries
    its other candidates first and comes back. ``console`` shows the claim
    and the host's live output to a person. ``host``: run the turn with this
    adapter instead of the one registered for the goal's host kind.
    """
    config = config or TurnConfig.from_env(os.environ)
    with structlog.contextvars.bound_contextvars(goal_id=goal_id, agent_id=agent_id):
        goal = _goal(layout, goal_id)
        # Date everything by the filesystem's clock if ours disagrees (loopx.clock),
        # before any lease is judged: a clock a day ahead must neither take over a
        # live holder nor keep the goal waiting a day longer than its result asked.
        offset = calibrate(layout.goal_dir(goal_id))
        if offset:
            log.warning("clock_skew", seconds=round(offset.total_seconds(), 3))
        visible = _visibly_held(layout, goal_id, now=utcnow(), grace_s=config.lease_grace_s)
        if visible is not None:
            # Agents that ranked the same goal first race for it; the losers see
            # the winner's lease here and move on without queueing on the goal's
            # lock, which the winner holds across its fsyncs.
            return TurnAttempt(goal_id=goal_id, claimed=False, blocking_agent=visible.agent_id)
        if skip_if_busy and lock_busy(layout.epoch_file(goal_id)):  # the goal lock's file
            return TurnAttempt(goal_id=goal_id, claimed=False, busy=True)
        # The epoch counter and the lease share the goal's directory: one fsync
        # of it makes both names durable before anything of the turn is written.
        # A power cut in between may keep the lease without the raised counter;
        # the next claim takes max(counter, lease epoch) + 1, so no epoch is
        # handed out twice.
        with dir_sync_batch():
            claimed = claim(
                layout,
                goal_id,
                agent_id=agent_id,
                now=utcnow(),
                ttl_s=config.lease_ttl_s,
                grace_s=config.lease_grace_s,
                # No turn of this goal runs in this process: a lease of ours is one an error left.
                reclaim_own=goal_id not in _IN_FLIGHT,
            )
        if claimed.lease is None:
            blocking = claimed.blocking.agent_id if claimed.blocking else None
            return TurnAttempt(goal_id=goal_id, claimed=False, blocking_agent=blocking)
        lease = claimed.lease
        _IN_FLIGHT.add(goal_id)
        with structlog.contextvars.bound_contextvars(epoch=lease.epoch):
            if claimed.took_over is not None:
                log.warning("lease_taken_over", previous=claimed.took_over.agent_id)
                _kill_goal_processes(layout, goal_id, config.kill_grace_s)
            try:
                workdir = _workdir_claim(layout, goal, lease, config)
                if workdir.hold is None:
                    busy_with = workdir.blocking.goal_id if workdir.blocking else None
                    return TurnAttempt(goal_id=goal_id, claimed=False, workdir_busy=busy_with)
                try:
                    attempt = _claimed_turn(
                        layout,
                        goal,
                        lease,
                        stop=stop,
                        config=config,
                        console=console,
                        host=host,
                        on_turn=on_turn,
                    )
                finally:
                    release_workdir(layout, workdir.hold)
            finally:
                _IN_FLIGHT.discard(goal_id)
                release(layout, lease)
                structlog.contextvars.unbind_contextvars("turn_key")  # bound once it is known
    if goal.auto_merge and attempt.report is not None:  # issue 26: after the lease is released
        auto_merge(layout, goal_id)
    return attempt


def _workdir_claim(layout: Layout, goal: Goal, lease: Lease, config: TurnConfig) -> WorkdirClaim:
    """One turn per workdir (issue 26): the lock of the goal's workdir, or who holds it."""
    workdir = turn_workdir(layout, goal)
    now = utcnow()
    claim = acquire_workdir(layout, workdir, lease, now=now, grace_s=config.lease_grace_s)
    if claim.hold is None and claim.blocking is not None:
        log.info("workdir_busy", holder=claim.blocking.goal_id, path=claim.blocking.path)
        note_waiting(layout, goal.id, workdir, claim.blocking, now=now)
    return claim


def _claimed_turn(
    layout: Layout,
    goal: Goal,
    lease: Lease,
    *,
    stop: threading.Event | None,
    config: TurnConfig,
    console: AgentConsole | None = None,
    host: Host | None = None,
    on_turn: Callable[[str, datetime], None] | None = None,
) -> TurnAttempt:
    fence = fence_of(layout, lease)
    holder = _Holder(layout, lease, config.lease_ttl_s, config.lease_grace_s)
    terms = HostTerms(
        renew=holder.renew,
        renew_every_s=max(config.lease_ttl_s / 3, 0.05),
        kill_grace_s=config.kill_grace_s,
        host=host,
    )
    newest = newest_journal(layout, goal.id)
    turn_key = newest.name.removesuffix(".json") if newest is not None else ""
    try:
        # Issue 26: a --worktree goal's turns run in its worktree, made on the first claim.
        in_worktree = goal_in_worktree(layout, goal, fence)
        if in_worktree is None:
            return _attempt(goal.id)
        goal = in_worktree
        actions, pending = recover_goal(
            layout, goal.id, fence, now=utcnow(), paths=[newest] if newest is not None else []
        )
        if pending is not None:  # the newest journal is the pending one
            return _finish_pending(
                layout,
                goal,
                pending,
                fence,
                terms,
                actions,
                config,
                stop=stop,
                console=console,
                on_turn=on_turn,
            )
        fresh = _goal(layout, goal.id)  # finishing a turn may have changed it
        # ... but not where the turn runs: the worktree made above (issue 26).
        goal = fresh.model_copy(update={"workdir": goal.workdir}) if fresh.worktree else fresh
        decision = _decide(layout, goal, now=utcnow())
        if not decision.allowed or (stop is not None and stop.is_set()):
            if not decision.allowed:
                log.info("turn_refused", reason=decision.reason)
            return _attempt(goal.id, quota=decision, recovered=actions)
        account, refusal = _admit_account(layout, goal, decision, now=utcnow())
        if refusal is not None:
            log.info("turn_refused", reason=refusal.reason)
            return _attempt(goal.id, quota=refusal, recovered=actions)
        journal = _plan(layout, goal, lease, decision, account, now=utcnow())
        turn_key = journal.turn_key
        structlog.contextvars.bind_contextvars(turn_key=turn_key)  # unbound after the release
        create_journal(layout, journal, fence)
        if on_turn is not None:
            on_turn(turn_key, journal.created_at)
        done = execute(layout, goal, journal, fence, terms, stop=stop, console=console)
        return _attempt(goal.id, quota=decision, report=_report(done, actions))
    except LeaseLostError as e:
        log.warning("lease_lost", held=e.held, current=e.current)
        return _attempt(goal.id, report=_lost_report(goal.id, lease, turn_key, e.message))


def _finish_pending(  # noqa: PLR0917 - the claimed turn's own values, passed on
    layout: Layout,
    goal: Goal,
    pending: TurnJournal,
    fence: Fence,
    terms: HostTerms,
    actions: list[RecoveryAction],
    config: TurnConfig,
    *,
    stop: threading.Event | None,
    console: AgentConsole | None,
    on_turn: Callable[[str, datetime], None] | None = None,
) -> TurnAttempt:
    """Finish a turn recovery left to this claim: its done-check, or its host run again."""
    if pending.check_due():
        # Issue 26: the host finished; only its done-check is left to run.
        _kill_goal_processes(layout, goal.id, config.kill_grace_s)
        done = finish_checked(layout, pending, fence, terms, stop=stop)
        return _attempt(goal.id, report=_report(done, actions))
    # A host retried into a parked account would only meet the limit again.
    held = _account_holds(layout, pending, now=utcnow())
    if held is not None:
        return _attempt(goal.id, quota=held, recovered=actions)
    _kill_goal_processes(layout, goal.id, config.kill_grace_s)
    structlog.contextvars.bind_contextvars(turn_key=pending.turn_key)  # unbound after the release
    journal = pending.model_copy(update={"attempt": pending.attempt + 1, "updated_at": utcnow()})
    write_journal(layout, journal, fence)
    if on_turn is not None:
        on_turn(journal.turn_key, journal.updated_at)
    done = execute(layout, goal, journal, fence, terms, stop=stop, console=console)
    return _attempt(goal.id, report=_report(done, actions))


def _attempt(
    goal_id: str,
    *,
    quota: QuotaDecision | None = None,
    report: TurnReport | None = None,
    recovered: list[RecoveryAction] | None = None,
) -> TurnAttempt:
    return TurnAttempt(
        goal_id=goal_id,
        claimed=True,
        quota=quota,
        report=report,
        recovered=recovered if recovered is not None else (report.recovered if report else []),
    )


class _Holder:
    """The held lease, renewed from the host-wait loop."""

    def __init__(self, layout: Layout, lease: Lease, ttl_s: float, grace_s: float) -> None:
        self.layout = layout
        self.lease = lease
        self.ttl_s = ttl_s
        self.grace_s = grace_s

    def renew(self) -> None:
        """Extend the lease; a refused write (disk full) is tolerated while the lease lasts.

        Raises:
            LeaseLostError: a takeover happened.
            OSError: renewals kept failing past the lease's expiry and grace, after
                which another agent may take the goal: the host must stop now.

        """
        now = utcnow()
        try:
            self.lease = renew(self.layout, self.lease, now=now, ttl_s=self.ttl_s)
        except OSError as e:
            reason = resource_fault(e)
            if reason is None or now >= self.lease.expires_at + timedelta(seconds=self.grace_s):
                raise
            log.warning("lease_renewal_deferred", reason=reason)


def _visibly_held(layout: Layout, goal_id: str, *, now: datetime, grace_s: float) -> Lease | None:
    """The goal's lease when it plainly blocks a claim now (read without the lock), else None.

    Only a shortcut: None (no lease, a damaged one, one that may be taken
    over) sends the caller to :func:`loopx.turn.lease.claim`, which decides under
    the goal's lock.
    """
    try:
        current = read_lease(layout, goal_id)
    except CorruptFileError:
        return None
    if current is None:
        return None
    holder = holder_state(current, hostname=socket.gethostname())
    return None if takeover_allowed(current, holder, now=now, grace_s=grace_s) else current


def _goal(layout: Layout, goal_id: str) -> Goal:
    """:func:`loopx.registry.goals.get_goal`, parsing the goal file again only when it changed.

    Raises:
        GoalNotFoundError: no such goal.

    """
    goal = read_goal_cached(layout, validate_goal_id(goal_id))
    if goal is None:
        raise GoalNotFoundError(goal_id, layout.registry)
    return goal


def _decide(layout: Layout, goal: Goal, *, now: datetime) -> QuotaDecision:
    return decide(layout, goal, now=now, leased=False)


def _admit_account(
    layout: Layout, goal: Goal, decision: QuotaDecision, *, now: datetime
) -> tuple[Account | None, QuotaDecision | None]:
    """The goal's account policy, and the refusal when the account does not admit a turn now.

    Raises:
        AccountNotFoundError: the goal names an account that was removed.
    """
    name = account_of(goal.account, goal.host.kind)
    account = load_account(layout, name) if goal.account is not None else None
    admission = admit_turn(layout, name, goal.id, now=now, turn_timeout_s=goal.quota.turn_timeout_s)
    if admission.allowed:
        return account, None
    return account, refused_by_account(decision, admission)


def _account_holds(layout: Layout, journal: TurnJournal, *, now: datetime) -> QuotaDecision | None:
    """The refusal of a pending host retry by the journal's parked account, else None."""
    plan = journal.plan
    name = account_of(plan.account, plan.host_kind)
    admission = admit_turn(
        layout, name, journal.goal_id, now=now, turn_timeout_s=plan.turn_timeout_s
    )
    if admission.allowed or plan.quota is None:
        return None
    return refused_by_account(plan.quota, admission)


def _plan(
    layout: Layout,
    goal: Goal,
    lease: Lease,
    decision: QuotaDecision,
    account: Account | None,
    *,
    now: datetime,
) -> TurnJournal:
    state = load_state(layout, goal.id)
    seq = max(state.turn_seq, last_seq(layout, goal.id)) + 1
    turn_key = make_turn_key(goal.id, seq, lease.epoch)
    envelope = Envelope(
        goal_id=goal.id,
        turn_key=turn_key,
        seq=seq,
        epoch=lease.epoch,
        objective=goal.objective,
        workdir=goal.workdir,
        root=str(layout.root),
        result_file=str(result_path(layout, goal.id, turn_key)),
        turn_timeout_s=goal.quota.turn_timeout_s,
        deadline_at=now + timedelta(seconds=goal.quota.turn_timeout_s),
        state=state,
    )
    plan = TurnPlan(
        envelope=envelope,
        host_kind=goal.host.kind,
        argv=list(goal.host.argv),
        quota=decision,
        max_host_attempts=goal.max_host_attempts,
        turn_timeout_s=goal.quota.turn_timeout_s,
        max_rss_mb=goal.quota.max_rss_mb,
        prior_failures=state.consecutive_failures,
        done_check=goal.done_check,
        account=goal.account,
        on_limit=goal.on_limit or (account.on_limit if account is not None else "wait"),
        max_limit_waits=goal.max_limit_waits
        if goal.max_limit_waits is not None
        else (account.max_limit_waits if account is not None else None),
        max_overloads=account.max_overloads if account is not None else OVERLOADS_FOR_GATE,
    )
    return TurnJournal(
        loopx_version=__version__,
        goal_id=goal.id,
        agent_id=lease.agent_id,
        turn_key=turn_key,
        seq=seq,
        epoch=lease.epoch,
        plan=plan,
        created_at=now,
        updated_at=now,
    )


def _kill_goal_processes(layout: Layout, goal_id: str, grace_s: float) -> None:
    """Kill every process of this root still working for ``goal_id`` (a stale host tree)."""
    stale = find_by_env(str(layout.root), {environ.GOAL_ID: goal_id})
    if stale:
        log.warning("stale_host_killed", pids=[p.pid for p in stale])
        kill_tree(stale, grace_s=grace_s)


def _report(journal: TurnJournal, recovered: list[RecoveryAction]) -> TurnReport:
    good = journal.good_result
    return TurnReport(
        goal_id=journal.goal_id,
        agent_id=journal.agent_id,
        turn_key=journal.turn_key,
        seq=journal.seq,
        epoch=journal.epoch,
        attempt=journal.attempt,
        status=journal.status,
        kind=good.kind if good else None,
        failure=journal.failure,
        summary=journal.result.summary if journal.result else "",
        usage=journal.usage,
        completed_phases=journal.completed_phases,
        recovered=recovered,
    )


def _lost_report(goal_id: str, lease: Lease, turn_key: str, message: str) -> TurnReport:
    return TurnReport(
        goal_id=goal_id,
        agent_id=lease.agent_id,
        turn_key=turn_key,
        seq=0,
        epoch=lease.epoch,
        attempt=0,
        status=TurnStatus.FAILED,
        failure=TurnFailure.of(FailureReason.LEASE_LOST, message),
        completed_phases=[],
    )
