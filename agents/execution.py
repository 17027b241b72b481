"""Executing a planned turn: its host (again while killed from outside), then the later phases.

:func:`execute` runs the host of a journal that is planned (or waiting for a
retry), records the outcome with the host's secrets redacted, and finishes
the phases after it under one hold of the goal's lock. Claiming, quota and
the journal's plan are :mod:`loopx.agents.turn`'s.
"""

from __future__ import annotations

import contextlib
import dataclasses
import signal
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from tenacity import RetryCallState, Retrying, retry_if_exception, wait_random_exponential

from loopx import environ
from loopx.agents.console import AgentConsole
from loopx.agents.hostrun import HostRun, Limits, run_host
from loopx.agents.hosts import Host, HostOutput, Interpretation, host_for
from loopx.agents.hosts.plugins import PluginError
from loopx.agents.hosts.watch import StallWatcher
from loopx.errors import HostMissingError, HostUnsupportedError, LoopxError, resource_fault
from loopx.faults import fault_point
from loopx.log import get_logger
from loopx.model import utcnow
from loopx.quota.usage import Usage
from loopx.registry.model import Goal
from loopx.root import Layout
from loopx.secrets import redact_text, secret_values
from loopx.storage.files import ensure_dir, read_bytes
from loopx.turn.failures import FailureReason, TurnFailure
from loopx.turn.journal import (
    HostOutcome,
    Phase,
    TurnJournal,
    write_journal,
    write_journal_unfenced,
)
from loopx.turn.lease import Fence
from loopx.turn.phases import finish_held, settle
from loopx.turn.protocol import Envelope
from loopx.turn.tamper import GoalFingerprint
from loopx.web.livetail import LiveTail

log = get_logger(__name__)

RESULT_READ_LIMIT: Final = 1024 * 1024 + 1
# A finished host's outcome waits this long at most for a refused write once a
# stop was requested (the supervisor's stop grace is longer).
_STOP_WAIT_S: Final = 10.0
_WRITE_RETRY_MAX_S: Final = 5.0


@dataclass(frozen=True, slots=True)
class HostTerms:
    """What the turn lends its host run: lease renewal while it runs, and the kill grace."""

    renew: Callable[[], None]  # renews the lease; raises LeaseLostError once it is lost
    renew_every_s: float
    kill_grace_s: float
    host: Host | None = None  # the adapter to use; None: the one of the goal's host kind


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


def _read_result_file(path: Path) -> tuple[str | None, str | None]:
    """The result file's text (None: not written), and why it cannot be used, if it cannot.

    A refused file (a symlink, unreadable) or bytes that are not UTF-8 are
    reported as such instead of being passed on as text that fails to parse
    as JSON, which hid the reason.
    """
    try:
        data = read_bytes(path)
    except FileNotFoundError:
        return None, None
    except (OSError, LoopxError) as e:
        message = e.message if isinstance(e, LoopxError) else str(e)
        return None, f"the result file was refused: {message}"
    data = data[:RESULT_READ_LIMIT]
    try:
        return data.decode("utf-8"), None
    except UnicodeDecodeError as e:
        # A result cut at the read limit may end inside a character: the size check reports it.
        if len(data) == RESULT_READ_LIMIT and e.start >= len(data) - 3:
            return data[: e.start].decode("utf-8"), None
        return data.decode("utf-8", errors="replace"), (
            f"the result file is not UTF-8: byte {e.start} ({data[e.start : e.start + 1]!r})"
        )


def execute(
    layout: Layout,
    goal: Goal,
    journal: TurnJournal,
    fence: Fence,
    terms: HostTerms,
    *,
    stop: threading.Event | None,
    console: AgentConsole | None = None,
) -> TurnJournal:
    """host_execute (+ typed_result, validation in the same write), then the other phases.

    The host runs again under the same turn key while a SIGKILL LoopX did not
    send ends it and attempts remain.

    Returns:
        The journal at its end (committed, failed or stopped).

    Raises:
        LeaseLostError: a newer epoch took the goal; nothing more was written.

    """
    fault_point(f"before:{Phase.HOST_EXECUTE}")
    envelope = journal.plan.envelope.model_copy(update={"attempt": journal.attempt})
    result_file = Path(envelope.result_file)
    ensure_dir(result_file.parent)
    result_file.unlink(missing_ok=True)
    try:
        host = terms.host or host_for(goal.host.kind)
        invocation = host.prepare(goal, envelope)
    except (HostMissingError, HostUnsupportedError, PluginError) as e:
        failed = journal.model_copy(
            update={"failure": TurnFailure.of(FailureReason.HOST_MISSING, e.message)}
        )
        return _after_host(
            layout, settle(failed, now=utcnow()), fence, result_file, renew=terms.renew, stop=stop
        )
    env = _host_env(layout, journal, invocation.env)
    guard = GoalFingerprint.take(layout, goal.id, running=journal.turn_key)
    tampered_before: list[str] = []  # found before a retry's own journal write
    earlier = Usage()  # what SIGKILLed attempts of this turn spent
    tail = LiveTail(layout, goal.id, journal.turn_key, secret_values(env))
    while True:
        if console is not None:
            console.started(goal, seq=journal.seq, attempt=journal.attempt)
        try:
            run = run_host(
                invocation.argv,
                stdin=invocation.stdin,
                cwd=Path(goal.workdir),
                env=env,
                limits=Limits(
                    timeout_s=journal.plan.turn_timeout_s,
                    max_rss_mb=journal.plan.max_rss_mb,
                    kill_grace_s=terms.kill_grace_s,
                ),
                turn_key=journal.turn_key,
                loopx_root=str(layout.root),
                stop=stop,
                tick=terms.renew,
                tick_every_s=terms.renew_every_s,
                tee=tail.feed,
                watch=StallWatcher(invocation.stall) if invocation.stall is not None else None,
                echo=console.output if console is not None else None,
            )
        finally:
            tail.close()  # the host ended (or the turn failed): no live output any more
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
    outcome, reading = _outcome(
        host, envelope, journal, run, result_file=result_file, secrets=secret_values(env)
    )
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
    return _after_host(
        layout, settle(journal, now=utcnow()), fence, result_file, renew=terms.renew, stop=stop
    )


def _killed_from_outside(run: HostRun, journal: TurnJournal, stop: threading.Event | None) -> bool:
    """Whether the host died of a SIGKILL LoopX did not send, with an attempt left."""
    return (
        run.killed is None
        and not run.watched
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
    *,
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
    text, refused = _read_result_file(result_file)
    text = redact_text(text, secrets) if text is not None else None
    if refused is not None and run.exit_code == 0:
        failure = TurnFailure.of(FailureReason.INVALID_RESULT, refused)
        return HostOutcome.model_validate(
            {**base, "result_file_text": text, "failure": failure}
        ), None
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
    layout: Layout,
    journal: TurnJournal,
    fence: Fence,
    result_file: Path,
    *,
    renew: Callable[[], None],
    stop: threading.Event | None,
) -> TurnJournal:
    """Record the host's outcome and finish the phases, waiting out a full or failing disk.

    The host ran and its outcome exists only in memory until this write
    passes: giving up would make recovery run the host again. So a write the
    machine refuses is retried with backoff (the lease renewed meanwhile)
    until it passes, the lease is lost, or a requested stop has waited
    ``_STOP_WAIT_S`` for it.
    """
    stop_deadline: list[float] = []

    def give_up(state: RetryCallState) -> bool:
        if stop is None or not stop.is_set():
            return False
        if not stop_deadline:
            stop_deadline.append(state.outcome_timestamp or 0.0)
        return (state.outcome_timestamp or 0.0) - stop_deadline[0] > _STOP_WAIT_S

    def waiting(state: RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome is not None else None
        log.warning(
            "turn_writes_deferred",
            reason=resource_fault(error) if error is not None else None,
            attempt=state.attempt_number,
        )
        # Still failing past the lease's grace: fencing refuses our writes if
        # another agent took the goal meanwhile; until then keep trying.
        with contextlib.suppress(OSError):
            renew()

    for attempt in Retrying(
        retry=retry_if_exception(lambda e: resource_fault(e) is not None),
        wait=wait_random_exponential(multiplier=0.25, max=_WRITE_RETRY_MAX_S),
        stop=give_up,
        before_sleep=waiting,
        reraise=True,
    ):
        with attempt:
            done = _write_outcome_and_finish(layout, journal, fence, result_file)
    fault_point(f"after:{Phase.SCHEDULER_ACK}")
    return done


def _write_outcome_and_finish(
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
        return finish_held(layout, journal, now=utcnow())
