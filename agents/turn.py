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
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

import structlog

from loopx import __version__, environ
from loopx.agents.console import AgentConsole
from loopx.agents.execution import HostTerms, execute
from loopx.agents.hostrun import DEFAULT_KILL_GRACE_S
from loopx.agents.hosts import Host
from loopx.clock import calibrate
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
    result_path,
    write_journal,
)
from loopx.turn.lease import (
    DEFAULT_GRACE_S,
    DEFAULT_TTL_S,
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
) -> TurnAttempt:
    """Like :func:`run_one_turn`, saying why no turn ran.

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
            )
        if claimed.lease is None:
            blocking = claimed.blocking.agent_id if claimed.blocking else None
            return TurnAttempt(goal_id=goal_id, claimed=False, blocking_agent=blocking)
        lease = claimed.lease
        with structlog.contextvars.bound_contextvars(epoch=lease.epoch):
            if claimed.took_over is not None:
                log.warning("lease_taken_over", previous=claimed.took_over.agent_id)
                _kill_goal_processes(layout, goal_id, config.kill_grace_s)
            try:
                return _claimed_turn(
                    layout, goal, lease, stop=stop, config=config, console=console, host=host
                )
            finally:
                release(layout, lease)
                structlog.contextvars.unbind_contextvars("turn_key")  # bound once it is known


def _claimed_turn(
    layout: Layout,
    goal: Goal,
    lease: Lease,
    *,
    stop: threading.Event | None,
    config: TurnConfig,
    console: AgentConsole | None = None,
    host: Host | None = None,
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
        actions, pending = recover_goal(
            layout, goal.id, fence, now=utcnow(), paths=[newest] if newest is not None else []
        )
        if pending is not None:
            _kill_goal_processes(layout, goal.id, config.kill_grace_s)
            turn_key = pending.turn_key
            structlog.contextvars.bind_contextvars(turn_key=turn_key)  # unbound after the release
            journal = pending.model_copy(
                update={"attempt": pending.attempt + 1, "updated_at": utcnow()}
            )
            write_journal(layout, journal, fence)
            done = execute(layout, goal, journal, fence, terms, stop=stop, console=console)
            return _attempt(goal.id, report=_report(done, actions))
        goal = _goal(layout, goal.id)  # finishing a turn may have changed it
        decision = _decide(layout, goal, now=utcnow())
        if not decision.allowed:
            log.info("turn_refused", reason=decision.reason)
            return _attempt(goal.id, quota=decision, recovered=actions)
        if stop is not None and stop.is_set():
            return _attempt(goal.id, quota=decision, recovered=actions)
        journal = _plan(layout, goal, lease, decision, now=utcnow())
        turn_key = journal.turn_key
        structlog.contextvars.bind_contextvars(turn_key=turn_key)  # unbound after the release
        create_journal(layout, journal, fence)
        done = execute(layout, goal, journal, fence, terms, stop=stop, console=console)
        return _attempt(goal.id, quota=decision, report=_report(done, actions))
    except LeaseLostError as e:
        log.warning("lease_lost", held=e.held, current=e.current)
        return _attempt(goal.id, report=_lost_report(goal.id, lease, turn_key, e.message))


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


def _plan(
    layout: Layout, goal: Goal, lease: Lease, decision: QuotaDecision, *, now: datetime
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
