"""One whole turn of one goal, as an agent process takes it: the kernel's table, this process's side.

:func:`attempt_turn` is what the agent loop calls (``loopx turn run-once``
prints its reasons when no turn ran); :func:`run_one_turn` is the same
returning only the report. The turn itself is the kernel's table of steps
(:mod:`loopx.turn.steps.table`); what it needs of a process is
:class:`AgentProcesses`: spawning the host and the done-check, killing a
stale host tree, telling the heartbeat, merging a done goal.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import structlog

from loopx import environ
from loopx.accounts.records import account_of
from loopx.agents.automerge import auto_merge
from loopx.agents.checkrun import run_done_check
from loopx.agents.console import AgentConsole
from loopx.agents.execution import run_host_turn
from loopx.agents.hosts import Host
from loopx.agents.sandbox.sandboxturn import TurnSandbox
from loopx.clock import calibrate
from loopx.donecheck import CheckResult
from loopx.log import get_logger
from loopx.process import find_by_env, kill_tree
from loopx.root import Layout
from loopx.turn.attempt import TurnAttempt, TurnReport
from loopx.turn.journal import TurnJournal
from loopx.turn.steps import TurnConfig, TurnContext, TurnOptions, take_turn
from loopx.turn.steps.recovering import read_goal

log = get_logger(__name__)

__all__ = ["AgentProcesses", "TurnConfig", "attempt_turn", "run_one_turn"]


class AgentProcesses:
    """The process side of a turn (:class:`loopx.turn.steps.context.TurnProcesses`)."""

    def __init__(
        self,
        config: TurnConfig,
        *,
        console: AgentConsole | None = None,
        host: Host | None = None,
        on_turn: Callable[[str, datetime], None] | None = None,
    ) -> None:
        self.config = config
        self.console = console
        self.host = host  # None: the adapter registered for the goal's host kind
        self.on_turn = on_turn

    def kill_stale(self, layout: Layout, goal_id: str) -> None:
        """Kill every process of this root still working for ``goal_id`` (a stale host tree)."""
        self._end(layout, {environ.GOAL_ID: goal_id}, "stale_host_killed")

    def end_turn(
        self, layout: Layout, turn_key: str, *, found: Callable[[list[int]], None]
    ) -> list[int]:
        """Kill every process of this root carrying ``turn_key``; the pids that outlived it."""
        return self._end(layout, {environ.TURN_KEY: turn_key}, "previous_turn_killed", found)

    def _end(
        self,
        layout: Layout,
        marks: dict[str, str | None],
        event: str,
        found: Callable[[list[int]], None] | None = None,
    ) -> list[int]:
        """SIGTERM, SIGKILL after the kill grace, and a bounded wait: what still runs."""
        stale = find_by_env(str(layout.root), marks)
        if not stale:
            return []
        pids = sorted(p.pid for p in stale)
        log.warning(event, pids=pids)
        if found is not None:
            found(pids)
        left = kill_tree(stale, grace_s=self.config.kill_grace_s)
        return sorted(p.pid for p in left)

    def turn_started(self, turn_key: str, at: datetime) -> None:
        """Publish the turn in the agent's heartbeat."""
        if self.on_turn is not None:
            self.on_turn(turn_key, at)

    def run_host(self, ctx: TurnContext) -> TurnJournal:
        """The host step's run (:func:`loopx.agents.execution.run_host_turn`)."""
        return run_host_turn(ctx, host=self.host, console=self.console)

    def run_check(self, ctx: TurnContext, journal: TurnJournal) -> CheckResult:
        """The journal's done-check, contained like a host, in the turn's workdir."""
        spec = journal.plan.done_check
        assert spec is not None  # noqa: S101 - the check step runs only when one is due
        workdir = journal.plan.envelope.workdir
        env = environ.without((environ.FAULT,))
        own = {environ.GOAL_ID: journal.goal_id, environ.WORKDIR: workdir}
        env.update(own)
        argv = spec.argv
        if isinstance(ctx.sandbox, TurnSandbox):  # the same confinement as the host's
            env = ctx.sandbox.environment(env, own)
            argv = ctx.sandbox.wrap(argv, cwd=Path(workdir), env=env, result_file=None)
        result = run_done_check(
            argv,
            cwd=Path(workdir),
            timeout_s=spec.timeout_s,
            env=env,
            loopx_root=str(ctx.layout.root),
            turn_key=journal.turn_key,
            kill_grace_s=self.config.kill_grace_s,
            stop=ctx.options.stop,
            tick=ctx.claimed.holder.renew,
            tick_every_s=ctx.config.renew_every_s,
        )
        # The check as the goal states it, not the sandbox's wrapping (its scratch paths).
        return result.model_copy(update={"argv": list(spec.argv)})

    def open_sandbox(self, ctx: TurnContext) -> TurnSandbox:
        """The turn's sandbox, with its proxy serving (:mod:`loopx.agents.sandbox`)."""
        plan = ctx.planned.plan
        assert plan.sandbox is not None  # noqa: S101 - the sandbox row applies only then
        return TurnSandbox(
            ctx.layout,
            ctx.goal.id,
            plan.sandbox,
            account=account_of(plan.account, plan.host_kind),
            host_kind=plan.host_kind,
        )

    def merge(self, layout: Layout, goal_id: str) -> None:
        """Merge the goal's branch if it is done (:func:`loopx.agents.automerge.auto_merge`)."""
        auto_merge(layout, goal_id)


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
    on_turn: Callable[[str, datetime], None] | None = None,
    in_flight: set[str] | None = None,
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
    ``in_flight``: the goals whose turns this caller runs now (an agent's
    own set): a lease this process holds for any other goal is one an error
    left, and is taken over at once.
    """
    config = config or TurnConfig.from_env(os.environ)
    with structlog.contextvars.bound_contextvars(goal_id=goal_id, agent_id=agent_id):
        goal = read_goal(layout, goal_id)
        # Date everything by the filesystem's clock if ours disagrees (loopx.clock),
        # before any lease is judged: a clock a day ahead must neither take over a
        # live holder nor keep the goal waiting a day longer than its result asked.
        offset = calibrate(layout.goal_dir(goal_id))
        if offset:
            log.warning("clock_skew", seconds=round(offset.total_seconds(), 3))
    processes = AgentProcesses(config, console=console, host=host, on_turn=on_turn)
    options = TurnOptions(stop=stop, skip_if_busy=skip_if_busy, in_flight=in_flight)
    return take_turn(TurnContext(layout, goal, agent_id, config, options, processes))
