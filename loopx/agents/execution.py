"""The host step's process side: run a planned turn's host (again while killed from outside).

:func:`run_host_turn` is what the agent lends the kernel's host step
(:mod:`loopx.turn.steps.hosting`): it spawns the journal's host through its
adapter, watches it (the lease renewed, the live tail, the console), runs
it again after a SIGKILL LoopX did not send, and returns the journal with
the outcome read and the host's secrets redacted. Settling it, recording it
and the phases after it are the kernel's steps.
"""

from __future__ import annotations

import dataclasses
import signal
import threading
from collections.abc import Mapping
from pathlib import Path

from loopx import environ, tracing
from loopx.accounts.clihome import HostEnvironment, host_environment
from loopx.accounts.records import account_of
from loopx.agents.console import AgentConsole
from loopx.agents.hostlimits import Limits
from loopx.agents.hostresult import read_outcome, reported_windows, tampered_outcome, with_tokens
from loopx.agents.hostrun import HostRun, run_host
from loopx.agents.hosts import Host, HostInvocation, host_for
from loopx.agents.hosts.autonomy import with_autonomy
from loopx.agents.hosts.base import ActivityFiles
from loopx.agents.hosts.plugins import PluginError
from loopx.agents.hosts.stallwatch import StallWatcher
from loopx.agents.sandbox.sandboxturn import TurnSandbox
from loopx.errors import (
    HostMissingError,
    HostUnsupportedError,
    LoopxError,
)
from loopx.log import get_logger
from loopx.model import utcnow
from loopx.root import Layout
from loopx.secrets import secret_values
from loopx.storage.dirs import ensure_dir
from loopx.turn.failures import FailureReason, TurnFailure
from loopx.turn.journal import TurnJournal, write_journal
from loopx.turn.livetail import LiveTail
from loopx.turn.protocol import Envelope
from loopx.turn.stall import DEFAULT_STALL_TIMEOUT_S, stalled_envelope
from loopx.turn.steps.committing import clear_result
from loopx.turn.steps.context import TurnContext
from loopx.turn.tamper import GoalFingerprint
from loopx.usage import Usage

log = get_logger(__name__)


def _host_env(
    layout: Layout, journal: TurnJournal, extra: Mapping[str, str], account: Mapping[str, str]
) -> dict[str, str]:
    envelope = journal.plan.envelope
    env = environ.without((environ.FAULT,))
    env.update(account)  # the account's environment, under the adapter's own
    env.update(extra)
    env.update(
        {
            environ.GOAL_ID: journal.goal_id,
            environ.TURN_KEY: journal.turn_key,
            environ.ROOT: str(layout.root),
            environ.WORKDIR: envelope.workdir,
            environ.RESULT_FILE: envelope.result_file,
            tracing.RESOURCE_VAR: tracing.resource_attributes(
                journal.goal_id, journal.turn_key, env.get(tracing.RESOURCE_VAR)
            ),
        }
    )
    return env


def _loopx_vars(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(environ.PREFIX)}


def _account_env(layout: Layout, journal: TurnJournal) -> HostEnvironment | TurnFailure:
    """The turn's account environment, or the auth failure of credentials that cannot be used.

    An env file that is gone or readable by others needs a human: an auth
    failure, which gates the account.
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


def run_host_turn(
    ctx: TurnContext, *, host: Host | None = None, console: AgentConsole | None = None
) -> TurnJournal:
    """The host step's process side: the journal with the host's outcome and usage, unsettled.

    The host runs again under the same turn key while a SIGKILL LoopX did not
    send ends it and attempts remain (each attempt counted in the journal).
    A host that cannot start (a missing program, an unusable account) gives
    the journal with its failure and no outcome.

    Raises:
        LeaseLostError: a newer epoch took the goal; nothing more was written.

    """
    journal = ctx.planned
    envelope = _envelope(journal)
    result_file = Path(envelope.result_file)
    ensure_dir(result_file.parent)
    clear_result(result_file)
    try:
        adapter = host or host_for(ctx.goal.host.kind)
        invocation = with_autonomy(ctx.goal, adapter.prepare(ctx.goal, envelope))
    except (HostMissingError, HostUnsupportedError, PluginError) as e:
        return journal.model_copy(
            update={"failure": TurnFailure.of(FailureReason.HOST_MISSING, e.message)}
        )
    account = _account_env(ctx.layout, journal)
    if isinstance(account, TurnFailure):
        return journal.model_copy(update={"failure": account})
    env = _host_env(ctx.layout, journal, invocation.env, account.env)
    secrets = _secrets_of(env, account, console)
    sandbox = ctx.sandbox if isinstance(ctx.sandbox, TurnSandbox) else None
    if sandbox is not None:  # the keys stay outside: the proxy adds them
        own = {k: env[k] for k in (*account.env, *invocation.env) if k in env}
        env = sandbox.environment(env, {**own, **_loopx_vars(env)})
    watch = _HostWatch(ctx, adapter, secrets, console, sandbox)
    run, journal, envelope = watch.run(journal, envelope, invocation, env)
    # Host output is stored (journal, run logs, history): secret values of the
    # host's environment are replaced before anything reads or keeps it.
    outcome, reading = read_outcome(
        adapter, envelope, journal, run, result_file=result_file, secrets=watch.secrets
    )
    outcome = tampered_outcome(outcome, watch.tampered(journal), ctx.goal.id)
    windows = reported_windows(adapter, env, reading)
    if windows:
        outcome = outcome.model_copy(update={"windows": windows})
    if sandbox is not None:
        outcome = outcome.model_copy(update={"network": sandbox.report()})
    return journal.model_copy(update={"outcome": outcome, "usage": with_tokens(run.usage, reading)})


def _envelope(journal: TurnJournal) -> Envelope:
    """The envelope of the journal's current attempt (what an interrupted one left, if any).

    On a run of the stall ladder, the rung's session and note (:mod:`loopx.turn.stall`).
    """
    envelope = journal.plan.envelope.model_copy(
        update={"attempt": journal.attempt, "interrupted": interruption(journal)}
    )
    return stalled_envelope(envelope, journal.stall)


def activity_paths(host: Host, env: Mapping[str, str]) -> tuple[str, ...]:
    """What the host's CLI writes while it works, a sign of life besides its pipes."""
    return tuple(host.activity_paths(env)) if isinstance(host, ActivityFiles) else ()


def stall_timeout(ctx: TurnContext, invocation: HostInvocation) -> float | None:
    """The run's stall timeout: the goal's, else the default of a host that streams output."""
    own = ctx.goal.quota.stall_timeout_s
    if own is not None:
        return own
    return DEFAULT_STALL_TIMEOUT_S if invocation.streams else None


class _HostWatch:
    """One host run and its reruns after a SIGKILL from outside, watched for root tampering."""

    def __init__(
        self,
        ctx: TurnContext,
        host: Host,
        secrets: list[str],
        console: AgentConsole | None,
        sandbox: TurnSandbox | None = None,
    ) -> None:
        self.ctx, self.host, self.secrets, self.console = ctx, host, secrets, console
        self.sandbox = sandbox
        self.tampered_before: list[str] = []  # found before a retry's own journal write
        self.guard = GoalFingerprint.take(ctx.layout, ctx.goal.id, running=ctx.planned.turn_key)

    def run(
        self,
        journal: TurnJournal,
        envelope: Envelope,
        invocation: HostInvocation,
        env: dict[str, str],
    ) -> tuple[HostRun, TurnJournal, Envelope]:
        """Run the host until it ends other than by an outside SIGKILL (or attempts run out)."""
        ctx = self.ctx
        earlier = Usage()  # what SIGKILLed attempts of this turn spent
        while True:
            run = self._once(journal, invocation, env)
            if not _killed_from_outside(run, journal, ctx.options.stop):
                return dataclasses.replace(run, usage=_added(earlier, run.usage)), journal, envelope
            # SIGKILL that LoopX did not send (the OOM killer, an operator): an
            # interruption like the agent dying mid-host, so the host runs again
            # under the same turn key while attempts remain (docs/host-protocol.md).
            log.warning("host_killed_from_outside", pid=run.pid, attempt=journal.attempt)
            earlier = _added(earlier, run.usage)
            self.tampered_before += self.guard.changed(
                ctx.layout, ctx.goal.id, running=journal.turn_key
            )
            journal = journal.model_copy(
                update={"attempt": journal.attempt + 1, "updated_at": utcnow()}
            )
            write_journal(ctx.layout, journal, ctx.fence)
            # The journal rewrite moved turns/'s mtime: fingerprint again for the next attempt.
            self.guard = GoalFingerprint.take(ctx.layout, ctx.goal.id, running=journal.turn_key)
            envelope = _envelope(journal)
            invocation = with_autonomy(ctx.goal, self.host.prepare(ctx.goal, envelope))
            clear_result(Path(envelope.result_file))

    def _once(
        self, journal: TurnJournal, invocation: HostInvocation, env: dict[str, str]
    ) -> HostRun:
        ctx = self.ctx
        if self.console is not None:
            self.console.started(ctx.goal, seq=journal.seq, attempt=journal.attempt)
        tail = LiveTail(ctx.layout, ctx.goal.id, journal.turn_key, self.secrets)
        holder = ctx.claimed.holder

        def feed(chunk: bytes) -> None:
            tail.feed(chunk)
            holder.last_output_at = utcnow()  # published with the lease's next renewal

        argv, result_file = invocation.argv, Path(journal.plan.envelope.result_file)
        if self.sandbox is not None:
            argv = self.sandbox.wrap(
                argv, cwd=Path(ctx.goal.workdir), env=env, result_file=result_file
            )
        try:
            return run_host(
                argv,
                stdin=invocation.stdin,
                cwd=Path(ctx.goal.workdir),
                env=env,
                limits=Limits(
                    timeout_s=journal.plan.turn_timeout_s,
                    max_rss_mb=journal.plan.max_rss_mb,
                    kill_grace_s=ctx.config.kill_grace_s,
                    stall_timeout_s=stall_timeout(ctx, invocation),
                    activity_paths=activity_paths(self.host, env),
                ),
                turn_key=journal.turn_key,
                loopx_root=str(ctx.layout.root),
                stop=ctx.options.stop,
                tick=ctx.claimed.holder.renew,
                tick_every_s=ctx.config.renew_every_s,
                tee=feed,
                watch=StallWatcher(invocation.stall) if invocation.stall is not None else None,
                echo=self.console.output if self.console is not None else None,
            )
        finally:
            tail.close()  # the host ended (or the turn failed): no live output any more
            if holder.last_output_at is not None:
                log.info("host_output_last", at=holder.last_output_at.isoformat())
            if self.sandbox is not None:
                self.sandbox.collect(result_file)

    def tampered(self, journal: TurnJournal) -> list[str]:
        """LoopX's files the host changed while it ran (in any of its attempts)."""
        now = self.guard.changed(self.ctx.layout, self.ctx.goal.id, running=journal.turn_key)
        return sorted(set(self.tampered_before + now))


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
