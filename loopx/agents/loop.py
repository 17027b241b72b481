"""The agent worker loop: heartbeat -> select -> turn (claim, quota, phases, release) -> repeat.

An agent is a peer: it coordinates with other agents only through the files
of the root (exclusive lease creation and locks). ``run_once`` is one step;
``run`` is that step in a ``while`` with an interruptible idle sleep. Signal
handlers only record intent: the first SIGTERM/SIGINT sets the stop event
(the running turn's host gets SIGTERM, then SIGKILL after a grace, and the
journal ends ``stopped``), the agent exits 0 at the next safe point; a second
signal forces an immediate exit, leaving the journal for recovery.
"""

from __future__ import annotations

import itertools
import os
import random
import signal
import sys
import threading
from collections.abc import Mapping
from datetime import datetime
from enum import StrEnum
from types import FrameType
from typing import Final

import structlog

from loopx import exitcodes
from loopx.agents.console import AgentConsole
from loopx.agents.consoleline import show_outcome
from loopx.agents.heartbeat import Heartbeat, parent_of
from loopx.agents.hostguard import stop_guard
from loopx.agents.signals import install_signal_handlers
from loopx.clock import calibrate
from loopx.errors import LoopxError
from loopx.faults import fault_point
from loopx.fleet import AgentConfig, AgentPhase
from loopx.log import get_logger
from loopx.model import utcnow
from loopx.process import (
    set_parent_death_signal,
    unblock_handled_signals,
)
from loopx.registry.goalrecords import Goal
from loopx.retention.space import check_space
from loopx.root import Layout
from loopx.root.held import RootHandle
from loopx.schedule.index import ScheduleIndex
from loopx.secrets import secret_values
from loopx.storage.duties import Duties

log = get_logger(__name__)

FORCED_EXIT_CODE: Final = exitcodes.INTERRUPTED  # a second signal: leave now, recovery finishes
PARENT_GONE_CHECK_S: Final = 1.0
HINT_CHECK_S: Final = 0.25  # an idle agent looks for change hints this often (one stat)


def fits(goal: Goal, resources: Mapping[str, float] | None) -> bool:
    """Whether an agent holding ``resources`` may run ``goal``'s turns. Pure."""
    if resources is None:
        return True
    return all(resources.get(name, 0.0) >= amount for name, amount in goal.resources.items())


class Step(StrEnum):
    """What one step of the loop did."""

    RAN = "ran"  # a turn ran (committed, failed or stopped)
    IDLE = "idle"  # nothing eligible, or every claim lost its race
    STOPPING = "stopping"  # a stop was requested before anything started


class Agent:
    """One agent process's loop and its heartbeat."""

    def __init__(
        self, layout: Layout, config: AgentConfig, *, console: AgentConsole | None = None
    ) -> None:
        self.layout = layout
        self.config = config
        self.console = console
        self.stop = threading.Event()  # set: finish at the next safe point; passed to the turn
        # The goals whose turn this agent runs now: a lease of this process for any other
        # goal is one an error (EMFILE) left, and its next claim takes it over at once.
        self.in_flight: set[str] = set()
        self.signals_received = 0
        self.idle_streak = 0
        self._parent = parent_of(config)
        self._wake = threading.Event()
        self._beater: threading.Thread | None = None
        self._beats_done = threading.Event()
        # Which goals may run, kept current from change hints: a step costs
        # O(changed goals), not O(goals).
        self.index = ScheduleIndex(layout, accept=lambda goal: fits(goal, config.resources))
        self._since_beat = 0.0
        self.space_blocked: str | None = None  # why no new turn starts (disk limits), if so
        # The step and the heartbeat a resource error (EMFILE, MemoryError...) stops now.
        self.duties = Duties("agent")
        self.heartbeat = Heartbeat(layout, config.agent_id, self.duties)
        # The root by directory descriptor while `run` loops: a moved root stops the agent,
        # saying why, instead of a traceback at its next write.
        self._root: RootHandle | None = None
        self.root_moved: str | None = None

    # --- intent (called from signal handlers and tests) ---------------------------------------

    def request_stop(self) -> None:
        """Stop at the next safe point: no new turn; a running host is terminated by the turn."""
        self.stop.set()
        self._wake.set()

    def handle_signal(self, signum: int, _frame: FrameType | None = None) -> None:
        """SIGTERM/SIGINT: the first stops at a safe point, the second forces an exit now.

        Called from the signal-watcher thread (never inside the C-level
        handler's context), so setting the Event cannot deadlock the main thread.
        """
        self.signals_received += 1
        log.info("agent_signal", signal=signal.Signals(signum).name, count=self.signals_received)
        if self.signals_received > 1:
            # Ctrl-C twice, or the supervisor's grace ran out: the journal stays
            # in progress and `loopx recover` finishes it.
            os._exit(FORCED_EXIT_CODE)
        self.request_stop()

    # --- heartbeat ----------------------------------------------------------------------------

    @property
    def turns_done(self) -> int:
        """The turns this agent ran (published in its heartbeat)."""
        return self.heartbeat.turns_done

    @turns_done.setter
    def turns_done(self, value: int) -> None:
        self.heartbeat.turns_done = value

    def beat(self, phase: AgentPhase | None = None, *, goal_id: str | None = None) -> None:
        """Publish the heartbeat now (:meth:`loopx.agents.heartbeat.Heartbeat.beat`)."""
        self.heartbeat.beat(phase, goal_id=goal_id)

    def _parent_gone(self) -> bool:
        if self.config.parent_pid is None:
            return False
        return self._parent is None or not self._parent.alive()

    def _beat_forever(self) -> None:
        interval = max(0.1, self.config.heartbeat_s)
        while not self._beats_done.wait(min(interval, PARENT_GONE_CHECK_S)):
            try:
                self.duties.run("beat", lambda: self._beat_pass(interval))
            except (LoopxError, OSError) as e:
                if not self.check_root():
                    log.warning("heartbeat_failed", error=str(e))

    def _beat_pass(self, interval: float) -> None:
        """One pass of the heartbeat thread: is the parent alive, is a beat due."""
        if self._parent_gone():
            log.warning("agent_parent_gone", parent_pid=self.config.parent_pid)
            self.request_stop()
        self._since_beat += min(interval, PARENT_GONE_CHECK_S)
        if self._since_beat >= interval:
            self._since_beat = 0.0
            self.beat()

    def check_root(self) -> bool:
        """Whether the root's path no longer names the directory opened; the first time, stop.

        Logs ``agent_root_moved`` (error) once, to the agent's log, which is
        already open and so travels with the root, and asks the loop to stop;
        ``run`` then exits 1. The supervisor, which checks the same, records
        the stop in the root (``root-moved.json``) and exits for its unit to restart.
        """
        if self.root_moved is not None:
            return True
        if self._root is None:
            return False
        try:
            problem = self._root.problem()
        except OSError:
            return False  # a resource error says nothing about the root; the duty degrades
        if problem is None:
            return False
        self.root_moved = problem
        log.error("agent_root_moved", path=str(self.layout.root), problem=problem)
        self.request_stop()
        return True

    def start_heartbeat(self) -> None:
        """Beat now and then every ``heartbeat_s`` from a background thread (also during turns)."""
        self._beats_done = threading.Event()
        self._since_beat = 0.0
        self.beat(AgentPhase.STARTING)
        self._beater = threading.Thread(target=self._beat_forever, name="heartbeat", daemon=True)
        self._beater.start()

    def stop_heartbeat(self) -> None:
        """Stop the heartbeat thread and publish the final phase."""
        if self._beater is not None:
            self._beats_done.set()
            self._beater.join(timeout=5)
            self._beater = None

    # --- the loop -----------------------------------------------------------------------------

    def run_once(self) -> Step:
        """One step: select the eligible goals and run one turn of the first one we can claim.

        Agents see the same ranking and so race for the same goal. A goal whose
        lock another agent holds right now (it is claiming or writing that
        goal's turn) is passed over at first and tried again, waiting for the
        lock, only after every other candidate: a lost race costs a lock probe,
        not a wait, and no step goes idle while a goal may still be claimed.
        """
        if self.stop.is_set():
            return Step.STOPPING

        # Every step measures this clock against the files': an idle
        # agent whose clock is behind would otherwise wait for recorded times by its own.
        calibrate(self.layout.agents_dir)
        now = utcnow()
        if self._space_blocked(now):
            self.idle_streak += 1
            self.beat(AgentPhase.IDLE)
            return Step.IDLE
        self.index.refresh(now=now)
        ranked = self.index.ranked(now=now)
        return self._run_ranked([c.goal_id for c in ranked])

    def _space_blocked(self, now: datetime) -> bool:
        """Whether the root's disk limits stop new turns now (logged when that changes).

        A turn in flight is never stopped for this: only the next one waits.
        """
        problem = check_space(self.layout, now=now)
        if problem != self.space_blocked:
            if problem is not None:
                log.warning("turns_held_for_space", reason=problem)
            else:
                log.info("turns_resumed_space_freed", was=self.space_blocked)
            self.space_blocked = problem
        return problem is not None

    def _run_ranked(self, goal_ids: list[str]) -> Step:
        """Try the goals in order (busy ones again at the end); run the first turn we can."""
        from loopx.agents.turn import attempt_turn  # noqa: PLC0415 - heavy; only agents need it

        later: list[str] = []  # busy at the first try; tried again, waiting, after the rest
        # The second generator reads `later` only once the first is exhausted.
        tries = itertools.chain(((g, False) for g in goal_ids), ((g, True) for g in later))
        for goal_id, wait in tries:
            if self.stop.is_set():
                return Step.STOPPING
            # Published by the turn's own beat once its journal exists (``on_turn``),
            # or by the heartbeat thread: a claim that runs no turn writes nothing.
            self.heartbeat.set_phase(AgentPhase.RUNNING, goal_id=goal_id)
            structlog.contextvars.bind_contextvars(goal_id=goal_id)
            try:
                attempt = attempt_turn(
                    self.layout,
                    goal_id,
                    agent_id=self.config.agent_id,
                    stop=self.stop,
                    skip_if_busy=not wait,
                    console=self.console,
                    on_turn=self.heartbeat.on_turn,
                    in_flight=self.in_flight,
                )
            except LoopxError as e:
                # A damaged file or a busy lock of one goal must not stop the others.
                log.warning("turn_error", error=e.message, hint=e.hint)
                continue
            except OSError as e:
                # A full or failing disk: nothing of this turn was committed (a host
                # that finished waits inside the turn until its writes pass); back
                # off like an idle step and try again.
                self.heartbeat.note_fault(e)
                break
            finally:
                structlog.contextvars.unbind_contextvars("goal_id")
                self.index.touch(goal_id)  # its lease, state or quota changed, or a race was lost
            if attempt.busy:
                later.append(goal_id)
                continue
            report = attempt.report
            if report is not None:
                if self.console is not None:
                    show_outcome(self.console, self.layout, report)
                self.turns_done += 1
                self.idle_streak = 0
                # Idle from now, published by the next step's beat (running again,
                # or idle when nothing is eligible) or the heartbeat thread: one
                # heartbeat write per turn instead of two.
                self.heartbeat.set_phase(AgentPhase.IDLE)
                return Step.RAN
        self.idle_streak += 1
        self.beat(AgentPhase.IDLE)
        return Step.IDLE

    def idle_delay(self) -> float:
        """The next idle sleep: doubles with each idle step up to ``idle_max_s``, with jitter.

        The jitter keeps agents that went idle together from polling in lockstep.
        """
        base = min(
            self.config.idle_max_s, self.config.idle_min_s * 2 ** max(0, self.idle_streak - 1)
        )
        return float(base * random.uniform(0.5, 1.0))  # noqa: S311 - jitter, not cryptography

    def _idle_wait(self) -> bool:
        """Sleep until a waiting goal's time comes, the index's next sweep, or a change hint.

        At most the idle backoff while some goal is eligible now (its claim lost
        a race); the hint log is checked with one ``stat`` every
        ``HINT_CHECK_S``, so a new or changed goal is picked up at once while an
        idle fleet costs next to nothing, however many goals wait. True once
        waited (the ``idle`` duty: None there is a resource error).
        """
        deadline = self.index.idle_sleep(now=utcnow(), longest=self.idle_delay())
        waited = 0.0
        while waited < deadline and not self.stop.is_set():
            chunk = min(HINT_CHECK_S, deadline - waited)
            if self._wake.wait(chunk) or self.index.hinted_since_refresh():
                break
            waited += chunk
        return True

    def done(self) -> bool:
        """Whether the loop should end (stop requested or the turn budget used)."""
        limit = self.config.max_turns
        return self.stop.is_set() or (limit is not None and self.turns_done >= limit)

    def run(self) -> int:
        """Loop until stopped (or ``max_turns``/``once``); returns the exit code (0)."""
        structlog.contextvars.bind_contextvars(agent_id=self.config.agent_id)
        self._root = RootHandle(self.layout.root)
        self.start_heartbeat()
        log.info("agent_started", pid=os.getpid())
        try:
            while not self.done() and not self.check_root():
                try:
                    step = self.duties.run("step", self.run_once)
                except (LoopxError, OSError):
                    if self.check_root():
                        break  # said why; not a traceback
                    raise
                if step is None:  # a resource error: back off like an idle step
                    self.idle_streak += 1
                    step = Step.IDLE
                if self.config.once:
                    break
                if step is Step.IDLE:
                    self._wake.clear()
                    if self.stop.is_set():
                        break
                    if self.duties.run("idle", self._idle_wait) is None:
                        # A resource error (a full disk, no descriptor) in the wait: the backoff.
                        self.stop.wait(self.idle_delay())
        finally:
            self.stop_heartbeat()
            self._final_beat()
            if self._root is not None:
                self._root.close()
            log.info("agent_stopped", turns_done=self.turns_done, root_moved=self.root_moved)
        return exitcodes.OK if self.root_moved is None else exitcodes.FAILURE

    def _final_beat(self) -> None:
        """Publish ``stopping``, unless the root moved away (there is nowhere to publish it)."""
        try:
            self.beat(AgentPhase.STOPPING)
        except (LoopxError, OSError):
            if not self.check_root():
                raise


def run_agent(layout: Layout, config: AgentConfig) -> int:
    """Run an agent process's loop with its signal handling; returns the exit code.

    Sets up what a process started by the supervisor needs: the handled
    signals unblocked (a spawning supervisor blocks them across the fork),
    ``PR_SET_PDEATHSIG`` so the agent gets SIGTERM when its parent dies, and
    the handlers.
    """
    fault_point("agent:start")
    console = AgentConsole(config.agent_id, sys.stdout, secret_values(os.environ))
    agent = Agent(layout, config, console=console)
    # Handlers first, then unblock: a SIGTERM that arrived during the spawn is
    # pending and must find the handler, not the default action.
    install_signal_handlers(agent.handle_signal)
    unblock_handled_signals()
    set_parent_death_signal(signal.SIGTERM)
    # The parent may have died before the death signal was armed (a race prctl leaves).
    if config.parent_pid is not None and agent._parent_gone():  # noqa: SLF001 - same module
        log.warning("agent_parent_gone_at_start", parent_pid=config.parent_pid)
        return exitcodes.OK
    try:
        return agent.run()
    finally:
        stop_guard()  # between runs: it exits, and is reaped here
