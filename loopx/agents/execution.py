"""Executing a planned turn: its host (again while killed from outside), then the later phases.

:func:`execute` runs the host of a journal that is planned (or waiting for a
retry), records the outcome with the host's secrets redacted, and finishes
the phases after it under one hold of the goal's lock. Claiming, quota and
the journal's plan are :mod:`loopx.agents.turn`'s.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import shutil
import signal
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from tenacity import RetryCallState, Retrying, retry_if_exception, wait_random_exponential

from loopx import environ
from loopx.accounts.files import HostEnvironment, host_environment
from loopx.accounts.model import account_of
from loopx.agents.checkphase import run_check_phase
from loopx.agents.console import AgentConsole
from loopx.agents.hostrun import HostRun, Limits, run_host
from loopx.agents.hosts import Host, HostOutput, Interpretation, host_for
from loopx.agents.hosts.plugins import PluginError
from loopx.agents.hosts.watch import StallWatcher
from loopx.errors import (
    HostMissingError,
    HostUnsupportedError,
    LoopxError,
    NotRegularFileError,
    resource_fault,
)
from loopx.faults import fault_point
from loopx.log import get_logger
from loopx.model import utcnow
from loopx.registry.model import Goal
from loopx.root import Layout
from loopx.secrets import redact_text, secret_values
from loopx.storage.files import ensure_dir, read_bytes
from loopx.turn.accounting import apply_turn
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
from loopx.usage import Usage
from loopx.web.livetail import LiveTail

log = get_logger(__name__)

RESULT_READ_LIMIT: Final = 1024 * 1024 + 1
# A finished host's outcome waits this long at most for a refused write once a
# stop was requested (the supervisor's stop grace is longer).
_STOP_WAIT_S: Final = 10.0
_WRITE_RETRY_MAX_S: Final = 5.0
# The fault points between the outcome's write and the later phases.
_OUTCOME_POINTS: Final = (
    f"after:{Phase.HOST_EXECUTE}",
    f"before:{Phase.TYPED_RESULT}",
    f"after:{Phase.TYPED_RESULT}",
    f"before:{Phase.VALIDATION}",
    f"after:{Phase.VALIDATION}",
)


@dataclass(frozen=True, slots=True)
class HostTerms:
    """What the turn lends its host run: lease renewal while it runs, and the kill grace."""

    renew: Callable[[], None]  # renews the lease; raises LeaseLostError once it is lost
    renew_every_s: float
    kill_grace_s: float
    host: Host | None = None  # the adapter to use; None: the one of the goal's host kind


def _host_env(
    layout: Layout, journal: TurnJournal, extra: Mapping[str, str], account: Mapping[str, str]
) -> dict[str, str]:
    envelope = journal.plan.envelope
    env = environ.without((environ.FAULT,))
    env.update(account)  # the account's environment (issue 27), under the adapter's own
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


def _account_env(layout: Layout, journal: TurnJournal) -> HostEnvironment | TurnFailure:
    """The turn's account environment, or the auth failure of credentials that cannot be used.

    An env file that is gone or readable by others needs a human: an auth
    failure, which gates the account (issue 27).
    """
    try:
        return host_environment(layout, account_of(journal.plan.account, journal.plan.host_kind))
    except LoopxError as e:
        return TurnFailure.of(FailureReason.HOST_AUTH, e.message)


def _secrets_of(
    env: Mapping[str, str], account: HostEnvironment, console: AgentConsole | None
) -> list[str]:
    """The values redacted from what the host prints: the env's secrets and the account's file's.

    The console (a person's view of the live output) learns the account's too.
    """
    if console is not None and account.secrets:
        console.secrets = sorted({*console.secrets, *account.secrets}, key=len, reverse=True)
    return sorted({*secret_values(env), *account.secrets}, key=len, reverse=True)


def interruption(journal: TurnJournal) -> str | None:
    """What the journal knows of attempt N-1 when this is attempt N > 1, for the prompt. Pure."""
    if journal.attempt <= 1:
        return None
    return (
        f"Attempt {journal.attempt - 1} of this turn (turn started "
        f"{journal.created_at.isoformat(timespec='seconds')}) was interrupted before it "
        "reported: its agent died or its host was killed from outside. The journal holds no "
        "result of it. Anything it changed in the working directory (files, commits) is "
        "still there, and a resumed session still holds its half-done tool calls: check the "
        "working directory's state before repeating or undoing work."
    )


def clear_result(path: Path) -> None:
    """Remove whatever is at the result path: a file, a FIFO, a device node, a directory tree.

    A host may leave any of them (issue 28); a directory is removed with its
    contents (``shutil.rmtree`` on Linux works through directory descriptors
    and never follows a symlink), so no stale drop box outlives its turn.
    """
    try:
        path.unlink()
    except FileNotFoundError:
        return
    except IsADirectoryError:
        shutil.rmtree(path)
    except OSError as e:
        if e.errno != errno.EISDIR and not path.is_dir():
            raise
        shutil.rmtree(path)


def _read_result_file(path: Path) -> tuple[str | None, str | None]:
    """The result file's text (None: not written), and why it cannot be used, if it cannot.

    A refused file (a symlink, a FIFO, a device, a directory, unreadable) or
    bytes that are not UTF-8 are reported as such instead of being passed on
    as text that fails to parse as JSON, which hid the reason. The read never
    blocks and reads at most ``RESULT_READ_LIMIT`` bytes, whatever the file
    claims (issue 28: a FIFO wedged the agent, a sparse file crashed it).
    """
    try:
        data = read_bytes(path, limit=RESULT_READ_LIMIT)
    except FileNotFoundError:
        return None, None
    except NotRegularFileError as e:
        return None, f"the result path is {e.kind}, not a regular file ({path})"
    except (OSError, LoopxError, MemoryError) as e:
        message = e.message if isinstance(e, LoopxError) else str(e) or type(e).__name__
        return None, f"the result file was refused: {message}"
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
    envelope = journal.plan.envelope.model_copy(
        update={"attempt": journal.attempt, "interrupted": interruption(journal)}
    )
    result_file = Path(envelope.result_file)
    ensure_dir(result_file.parent)
    clear_result(result_file)
    try:
        host = terms.host or host_for(goal.host.kind)
        invocation = host.prepare(goal, envelope)
    except (HostMissingError, HostUnsupportedError, PluginError) as e:
        failure = TurnFailure.of(FailureReason.HOST_MISSING, e.message)
        return _failed_before_host(layout, journal, fence, result_file, failure, terms, stop=stop)
    account = _account_env(layout, journal)
    if isinstance(account, TurnFailure):
        return _failed_before_host(layout, journal, fence, result_file, account, terms, stop=stop)
    env = _host_env(layout, journal, invocation.env, account.env)
    secrets = _secrets_of(env, account, console)
    guard = GoalFingerprint.take(layout, goal.id, running=journal.turn_key)
    tampered_before: list[str] = []  # found before a retry's own journal write
    earlier = Usage()  # what SIGKILLed attempts of this turn spent
    tail = LiveTail(layout, goal.id, journal.turn_key, secrets)
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
        envelope = envelope.model_copy(
            update={"attempt": journal.attempt, "interrupted": interruption(journal)}
        )
        invocation = host.prepare(goal, envelope)
        clear_result(result_file)
    run = dataclasses.replace(run, usage=_added(earlier, run.usage))
    # Host output is stored (journal, run logs, history): secret values of the
    # host's environment are replaced before anything reads or keeps it.
    outcome, reading = _outcome(
        host, envelope, journal, run, result_file=result_file, secrets=secrets
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
    usage = _with_tokens(run.usage, reading)
    journal = settle(journal.model_copy(update={"outcome": outcome, "usage": usage}), now=utcnow())
    # Park the account before the journal records the outcome: a crash in between leaves the
    # account parked, so no other goal runs into the limit (loopx.turn.accounting).
    _park_account(layout, journal)
    if journal.check_due():  # issue 26: the done_check phase, before any effect
        journal = check_then(layout, journal, fence, terms, stop=stop)
        if not journal.done(Phase.DONE_CHECK):
            return journal  # a stop ended the check: the next claim runs it again
    return _after_host(layout, journal, fence, result_file, renew=terms.renew, stop=stop)


def _park_account(layout: Layout, journal: TurnJournal) -> None:
    """The turn's effect on its account, early; a refused write leaves it to scheduler_apply.

    A full or read-only root must not cost the host's outcome: the outcome write waits the
    fault out, and scheduler_apply applies the account's update again (it is idempotent).
    """
    try:
        apply_turn(layout, journal)
    except OSError as e:
        if resource_fault(e) is None:
            raise
        log.warning("account_update_deferred", reason=resource_fault(e))


def _failed_before_host(  # noqa: PLR0917 - the turn's own values, passed on
    layout: Layout,
    journal: TurnJournal,
    fence: Fence,
    result_file: Path,
    failure: TurnFailure,
    terms: HostTerms,
    *,
    stop: threading.Event | None,
) -> TurnJournal:
    """A turn whose host could not start (missing program, unusable account) ends failed."""
    failed = settle(journal.model_copy(update={"failure": failure}), now=utcnow())
    return _after_host(layout, failed, fence, result_file, renew=terms.renew, stop=stop)


def _with_tokens(usage: Usage, reading: Interpretation | None) -> Usage:
    """The measured usage with the tokens and cost the host reported, if it did."""
    if reading is None:
        return usage
    return usage.model_copy(
        update={
            "input_tokens": reading.input_tokens,
            "output_tokens": reading.output_tokens,
            "cost_usd": reading.cost_usd,
        }
    )


def check_then(
    layout: Layout,
    journal: TurnJournal,
    fence: Fence,
    terms: HostTerms,
    *,
    stop: threading.Event | None,
) -> TurnJournal:
    """The done_check phase of a settled journal (:mod:`loopx.agents.checkphase`)."""
    return run_check_phase(
        layout,
        journal,
        fence,
        renew=terms.renew,
        renew_every_s=terms.renew_every_s,
        kill_grace_s=terms.kill_grace_s,
        stop=stop,
    )


def finish_checked(
    layout: Layout,
    journal: TurnJournal,
    fence: Fence,
    terms: HostTerms,
    *,
    stop: threading.Event | None,
) -> TurnJournal:
    """A journal recovery left for its done-check: run the check, then the other phases.

    The host is never run again: its outcome is in the journal.
    """
    journal = check_then(layout, journal, fence, terms, stop=stop)
    if not journal.done(Phase.DONE_CHECK):
        return journal
    result_file = Path(journal.plan.envelope.result_file)
    return _after_host(layout, journal, fence, result_file, renew=terms.renew, stop=stop)


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
            clear_result(result_file)  # its text is in the journal now
        # With a done-check these points passed before the check ran (checkphase).
        points = () if journal.done(Phase.DONE_CHECK) else _OUTCOME_POINTS
        for point in points:
            fault_point(point)
        return finish_held(layout, journal, now=utcnow())
