"""One whole turn of one goal: claim, finish leftovers, quota, journal, host, phases, release.

:func:`run_one_turn` is what the agent loop calls; :func:`attempt_turn` is the
same with the reasons a turn did not run (``loopx turn run-once`` prints them).

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

import contextlib
import dataclasses
import os
import signal
import socket
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Final, Literal

import structlog
from pydantic import Field

from loopx import __version__, environ
from loopx.agents.hostrun import DEFAULT_KILL_GRACE_S, HostRun, Limits, run_host
from loopx.agents.hosts import Host, HostOutput, Interpretation, host_for
from loopx.errors import (
    CorruptFileError,
    GoalNotFoundError,
    HostMissingError,
    LeaseLostError,
    LoopxError,
)
from loopx.faults import fault_point
from loopx.ids import validate_goal_id
from loopx.model import Record, utcnow
from loopx.process import find_by_env, kill_tree
from loopx.quota.decision import QuotaDecision, decide
from loopx.quota.usage import Usage
from loopx.registry.model import Goal
from loopx.root import Layout
from loopx.schedule.candidates import read_registry
from loopx.secrets import redact_text, secret_values
from loopx.state import load_state
from loopx.storage.files import dir_sync_batch, ensure_dir, lock_busy, read_bytes
from loopx.turn.failures import FailureReason, TurnFailure
from loopx.turn.journal import (
    HostOutcome,
    Phase,
    TurnJournal,
    TurnPlan,
    TurnStatus,
    create_journal,
    last_seq,
    make_turn_key,
    newest_journal,
    result_path,
    write_journal,
    write_journal_unfenced,
)
from loopx.turn.lease import (
    DEFAULT_GRACE_S,
    DEFAULT_TTL_S,
    Fence,
    Lease,
    claim,
    fence_of,
    holder_state,
    read_lease,
    release,
    renew,
    takeover_allowed,
)
from loopx.turn.phases import finish_held, settle
from loopx.turn.protocol import Envelope, ResultKind
from loopx.turn.recovery import RecoveryAction, recover_goal
from loopx.turn.tamper import GoalFingerprint

log = structlog.get_logger(__name__)

RESULT_READ_LIMIT: Final = 1024 * 1024 + 1


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
            lease_ttl_s=environ.seconds(environ.LEASE_TTL_S, DEFAULT_TTL_S, env),
            lease_grace_s=environ.seconds(environ.LEASE_GRACE_S, DEFAULT_GRACE_S, env),
            kill_grace_s=environ.seconds(environ.KILL_GRACE_S, DEFAULT_KILL_GRACE_S, env),
        )


class TurnReport(Record):
    """What one finished turn did (``loopx turn run-once --json`` prints it)."""

    schema_version: Literal[1] = 1
    goal_id: str
    agent_id: str
    turn_key: str
    seq: int
    epoch: int
    attempt: int
    status: TurnStatus  # for lease_lost: failed, and the journal was left to the new holder
    kind: ResultKind | None = None
    failure: TurnFailure | None = None
    summary: str = ""
    usage: Usage = Usage()
    completed_phases: list[Phase]
    recovered: list[RecoveryAction] = Field(default_factory=list)


class TurnAttempt(Record):
    """Whether a turn ran, and if not, why (not claimed; quota refused; stop requested)."""

    schema_version: Literal[1] = 1
    goal_id: str
    claimed: bool
    blocking_agent: str | None = None  # the live holder when not claimed
    quota: QuotaDecision | None = None
    report: TurnReport | None = None
    recovered: list[RecoveryAction] = Field(default_factory=list)
    # Not claimed because the goal's lock was busy and the caller asked not to wait.
    busy: bool = False


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
) -> TurnAttempt:
    """Like :func:`run_one_turn`, saying why no turn ran.

    ``skip_if_busy``: when the goal's lock is held right now (another agent is
    claiming it or writing its turn), return at once (``busy``) instead of
    waiting for the lock only to find the goal leased; the agent loop tries
    its other candidates first and comes back.
    """
    config = config or TurnConfig.from_env(os.environ)
    with structlog.contextvars.bound_contextvars(goal_id=goal_id, agent_id=agent_id):
        goal = _goal(layout, goal_id)
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
                return _claimed_turn(layout, goal, lease, stop=stop, config=config)
            finally:
                release(layout, lease)


def _claimed_turn(
    layout: Layout,
    goal: Goal,
    lease: Lease,
    *,
    stop: threading.Event | None,
    config: TurnConfig,
) -> TurnAttempt:
    fence = fence_of(layout, lease)
    holder = _Holder(layout, lease, config.lease_ttl_s)
    newest = newest_journal(layout, goal.id)
    turn_key = newest.name.removesuffix(".json") if newest is not None else ""
    try:
        actions, pending = recover_goal(
            layout, goal.id, fence, now=utcnow(), paths=[newest] if newest is not None else []
        )
        if pending is not None:
            _kill_goal_processes(layout, goal.id, config.kill_grace_s)
            turn_key = pending.turn_key
            journal = pending.model_copy(
                update={"attempt": pending.attempt + 1, "updated_at": utcnow()}
            )
            write_journal(layout, journal, fence)
            done = _execute(layout, goal, journal, fence, holder, stop=stop, config=config)
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
        create_journal(layout, journal, fence)
        done = _execute(layout, goal, journal, fence, holder, stop=stop, config=config)
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

    def __init__(self, layout: Layout, lease: Lease, ttl_s: float) -> None:
        self.layout = layout
        self.lease = lease
        self.ttl_s = ttl_s

    def renew(self) -> None:
        self.lease = renew(self.layout, self.lease, now=utcnow(), ttl_s=self.ttl_s)


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
    """:func:`loopx.registry.goals.get_goal`, parsing the registry again only when it changed.

    Raises:
        GoalNotFoundError: no such goal.

    """
    goal = read_registry(layout).goals.get(validate_goal_id(goal_id))
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


def _host_env(layout: Layout, journal: TurnJournal, extra: Mapping[str, str]) -> dict[str, str]:
    envelope = journal.plan.envelope
    env = environ.without((environ.FAULT,))
    env.update(extra)
    env.update(
        {
            environ.GOAL_ID: journal.goal_id,
            environ.TURN_KEY: journal.turn_key,
            environ.ROOT: str(layout.root),
            environ.WORKDIR: envelope.workdir,
            environ.RESULT_FILE: envelope.result_file,
        }
    )
    return env


def _read_result_file(path: Path) -> str | None:
    try:
        data = read_bytes(path)
    except FileNotFoundError:
        return None
    except (OSError, LoopxError) as e:
        return f"<unreadable result file: {e}>"
    return data[:RESULT_READ_LIMIT].decode("utf-8", errors="replace")


def _execute(
    layout: Layout,
    goal: Goal,
    journal: TurnJournal,
    fence: Fence,
    holder: _Holder,
    *,
    stop: threading.Event | None,
    config: TurnConfig,
) -> TurnJournal:
    """host_execute (+ typed_result, validation in the same write), then the other phases."""
    fault_point(f"before:{Phase.HOST_EXECUTE}")
    envelope = journal.plan.envelope.model_copy(update={"attempt": journal.attempt})
    result_file = Path(envelope.result_file)
    ensure_dir(result_file.parent)
    result_file.unlink(missing_ok=True)
    host = host_for(goal.host.kind)
    try:
        invocation = host.prepare(goal, envelope)
    except HostMissingError as e:
        failed = journal.model_copy(
            update={"failure": TurnFailure.of(FailureReason.HOST_MISSING, e.message)}
        )
        return _after_host(layout, settle(failed, now=utcnow()), fence, result_file)
    env = _host_env(layout, journal, invocation.env)
    guard = GoalFingerprint.take(layout, goal.id, running=journal.turn_key)
    tampered_before: list[str] = []  # found before a retry's own journal write
    earlier = Usage()  # what SIGKILLed attempts of this turn spent
    while True:
        run = run_host(
            invocation.argv,
            stdin=invocation.stdin,
            cwd=Path(goal.workdir),
            env=env,
            limits=Limits(
                timeout_s=journal.plan.turn_timeout_s,
                max_rss_mb=journal.plan.max_rss_mb,
                kill_grace_s=config.kill_grace_s,
            ),
            turn_key=journal.turn_key,
            loopx_root=str(layout.root),
            stop=stop,
            tick=holder.renew,
            tick_every_s=max(config.lease_ttl_s / 3, 0.05),
        )
        if not _killed_from_outside(run, journal, stop):
            break
        # SIGKILL that LoopX did not send (the OOM killer, an operator): an
        # interruption like the agent dying mid-host, so the host runs again
        # under the same turn key while attempts remain (docs/host-protocol.md).
        log.warning("host_killed_from_outside", pid=run.pid, attempt=journal.attempt)
        earlier = _added(earlier, run.usage)
        tampered_before += guard.changed(layout, goal.id, running=journal.turn_key)
        journal = journal.model_copy(
            update={"attempt": journal.attempt + 1, "updated_at": utcnow()}
        )
        write_journal(layout, journal, fence)
        # The journal rewrite moved turns/'s mtime: fingerprint again for the next attempt.
        guard = GoalFingerprint.take(layout, goal.id, running=journal.turn_key)
        envelope = envelope.model_copy(update={"attempt": journal.attempt})
        invocation = host.prepare(goal, envelope)
        result_file.unlink(missing_ok=True)
    run = dataclasses.replace(run, usage=_added(earlier, run.usage))
    # Host output is stored (journal, run logs, history): secret values of the
    # host's environment are replaced before anything reads or keeps it.
    outcome, reading = _outcome(host, envelope, journal, run, result_file, secret_values(env))
    tampered = sorted(
        set(tampered_before + guard.changed(layout, goal.id, running=journal.turn_key))
    )
    if tampered:
        log.warning("host_tampered_with_root", files=tampered)
        outcome = outcome.model_copy(
            update={
                "failure": TurnFailure.of(
                    FailureReason.ROOT_TAMPERED,
                    f"the host changed LoopX's files while it ran: {', '.join(tampered[:10])}; "
                    "they were left as found: see `loopx doctor` and "
                    f"`loopx replay {goal.id} --verify` (`--repair` rebuilds them from the journals)",
                )
            }
        )
    usage = run.usage
    if reading is not None:
        usage = usage.model_copy(
            update={
                "input_tokens": reading.input_tokens,
                "output_tokens": reading.output_tokens,
                "cost_usd": reading.cost_usd,
            }
        )
    journal = journal.model_copy(update={"outcome": outcome, "usage": usage})
    return _after_host(layout, settle(journal, now=utcnow()), fence, result_file)


def _killed_from_outside(run: HostRun, journal: TurnJournal, stop: threading.Event | None) -> bool:
    """Whether the host died of a SIGKILL LoopX did not send, with an attempt left."""
    return (
        run.killed is None
        and run.signal == signal.SIGKILL
        and journal.attempt < journal.plan.max_host_attempts
        and not (stop is not None and stop.is_set())
    )


def _added(a: Usage, b: Usage) -> Usage:
    return a.model_copy(
        update={
            "cpu_s": a.cpu_s + b.cpu_s,
            "wall_s": a.wall_s + b.wall_s,
            "peak_rss_mb": max(a.peak_rss_mb, b.peak_rss_mb),
        }
    )


def _outcome(
    host: Host,
    envelope: Envelope,
    journal: TurnJournal,
    run: HostRun,
    result_file: Path,
    secrets: list[str],
) -> tuple[HostOutcome, Interpretation | None]:
    """The recorded outcome (secrets redacted), and the adapter's reading of it."""
    stdout = redact_text(run.stdout.text(), secrets)
    stderr = redact_text(run.stderr.text(), secrets)
    base = {
        "attempt": journal.attempt,
        "pid": run.pid or None,
        "exit_code": run.exit_code,
        "signal": run.signal,
        "killed": run.killed,
        "stdout": stdout,
        "stderr": stderr,
        "stdout_dropped": run.stdout.dropped,
        "stderr_dropped": run.stderr.dropped,
        "started_at": run.started_at,
        "ended_at": run.ended_at,
    }
    if run.spawn_error is not None:
        failure = TurnFailure.of(FailureReason.HOST_MISSING, run.spawn_error)
        return HostOutcome.model_validate({**base, "failure": failure}), None
    if run.killed is not None:
        return HostOutcome.model_validate(base), None
    text = _read_result_file(result_file)
    text = redact_text(text, secrets) if text is not None else None
    output = HostOutput(
        exit_code=run.exit_code,
        signal=run.signal,
        stdout=stdout,
        stderr=stderr,
        stdout_dropped=run.stdout.dropped,
        stderr_dropped=run.stderr.dropped,
        result_file_text=text,
    )
    try:
        reading = host.interpret(envelope, output)
    except (LoopxError, ValueError) as e:
        reading_failure = TurnFailure.of(
            FailureReason.MALFORMED_OUTPUT,
            f"the {host.kind} adapter could not read the output: {e}",
        )
        return HostOutcome.model_validate(
            {**base, "result_file_text": text, "failure": reading_failure}
        ), None
    outcome = HostOutcome.model_validate(
        {
            **base,
            "result_file_text": text,
            "result": reading.result,
            "failure": reading.failure,
            "session": reading.session,
        }
    )
    return outcome, reading


def _after_host(
    layout: Layout, journal: TurnJournal, fence: Fence, result_file: Path
) -> TurnJournal:
    # One hold of the goal's lock (epoch checked once) for the outcome write and
    # every later phase: nothing else of this goal may write in between anyway.
    with fence.held():
        write_journal_unfenced(layout, journal)
        with contextlib.suppress(OSError):
            result_file.unlink()  # its text is in the journal now
        for point in (
            f"after:{Phase.HOST_EXECUTE}",
            f"before:{Phase.TYPED_RESULT}",
            f"after:{Phase.TYPED_RESULT}",
            f"before:{Phase.VALIDATION}",
            f"after:{Phase.VALIDATION}",
        ):
            fault_point(point)
        journal = finish_held(layout, journal, now=utcnow())
    fault_point(f"after:{Phase.SCHEDULER_ACK}")
    return journal


def _kill_goal_processes(layout: Layout, goal_id: str, grace_s: float) -> None:
    """Kill every process of this root still working for ``goal_id`` (a stale host tree)."""
    stale = find_by_env(str(layout.root), {environ.GOAL_ID: goal_id})
    if stale:
        log.warning("stale_host_killed", pids=[p.pid for p in stale])
        kill_tree(stale, grace_s=grace_s)


def _report(journal: TurnJournal, recovered: list[RecoveryAction]) -> TurnReport:
    ok = journal.failure is None and journal.result is not None
    return TurnReport(
        goal_id=journal.goal_id,
        agent_id=journal.agent_id,
        turn_key=journal.turn_key,
        seq=journal.seq,
        epoch=journal.epoch,
        attempt=journal.attempt,
        status=journal.status,
        kind=journal.result.kind if ok and journal.result else None,
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
