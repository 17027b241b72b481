"""The supervisor: keeps N agents alive on one root; ``tick(now)`` is one step, ``run`` the loop.

Start: take ``supervisor.lock``; reap what a previous (SIGKILLed) supervisor
left (its recorded agents, and any process whose environment names this
root and an agent); run recovery; spawn the agents, each the leader of its
own session; ``READY=1``. Each tick: reap dead agents and restart them with
exponential backoff (a crash loop is recorded for a human), kill agents
whose heartbeat stalled, apply a requested stop or reload, ping the
watchdog, refresh the status projection and, with ``--until-idle``, stop
once no goal can progress. Signal handlers only record intent; ``tick`` acts on it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Mapping
from types import FrameType
from typing import Final, TypeVar

from loopx import exitcodes, process
from loopx.clock import calibrate
from loopx.errors import CorruptFileError, LoopxError
from loopx.fleet import (
    AgentHeartbeat,
    AgentLoopFactory,
    ExitKind,
    ExitStatus,
    FleetRecord,
    FleetState,
)
from loopx.log import get_logger
from loopx.model import utcnow
from loopx.registry.catalog import load_registry
from loopx.root import Layout
from loopx.root.held import RootHandle, take_note
from loopx.storage.duties import Duties
from loopx.storage.files import read_model_or_none
from loopx.supervisor.backends import make_runner
from loopx.supervisor.canary import CanaryDuty
from loopx.supervisor.config import SupervisorConfig
from loopx.supervisor.exits import log_exit, settle_exit, working_on
from loopx.supervisor.gcduty import GcDuty
from loopx.supervisor.idlecheck import IdleCheck
from loopx.supervisor.leftovers import kill_leftovers, reap_previous, recover_turns
from loopx.supervisor.lock import acquire, read_record
from loopx.supervisor.mainloop import run_loop
from loopx.supervisor.notify import Notifier
from loopx.supervisor.process import reap_orphans
from loopx.supervisor.publish import RecordPublisher
from loopx.supervisor.runner import AgentRunner
from loopx.supervisor.scale import read_scale, scale_file
from loopx.supervisor.slot import Slot, resize
from loopx.supervisor.statusduty import StatusDuty

log = get_logger(__name__)

STALL_KILL_GRACE_S: Final = 2.0
# How often the root's path is checked against the directory the supervisor opened.
_ROOT_CHECK_S: Final = 2.0
_SPAWN_RETRY_S: Final = 1.0
T = TypeVar("T")


class Supervisor:
    """One root's supervisor."""

    def __init__(
        self,
        layout: Layout,
        config: SupervisorConfig,
        *,
        env: Mapping[str, str] | None = None,
        runner: AgentRunner | None = None,
        make_agent: AgentLoopFactory | None = None,
    ) -> None:
        """A supervisor of ``layout`` (not started yet).

        Args:
            layout: the runtime root.
            config: the fleet's settings.
            env: the environment agents inherit (default: this process's).
            runner: the back-end (default: the one ``config.backend`` names).
            make_agent: the agent loop a back-end runs in-process (``--backend
                ray``): :class:`loopx.agents.loop.Agent`, passed by the CLI.

        """
        self.layout = layout
        self.config = config
        self.env = dict(os.environ if env is None else env)
        self.notifier = Notifier(self.env)
        self.me = process.ProcessIdentity.current()
        self.runner = (
            runner if runner is not None else make_runner(layout, config, self.env, make_agent)
        )
        self.slots: list[Slot] = []
        self.wanted = config.agents
        self.state = FleetState.STARTING
        self.exit_code: int | None = None
        self.stop_requests = 0
        self.reload_requested = False
        self.child_event = False
        self._lock: object | None = None
        self._started_wall = utcnow()
        self._stop_deadline = 0.0
        self._stop_code = exitcodes.OK
        self._next_watchdog = 0.0
        self._next_refresh = 0.0
        self.idle = IdleCheck(layout, config)
        self._next_extend = 0.0
        self._last_status = ""
        self._published_pids: list[int | None] = []
        # supervisor.json: a refused write degrades the supervisor and is retried with backoff.
        self.publisher = RecordPublisher(layout)
        # The status projection on the fleet's cadence, and the notifications it feeds.
        self.status = StatusDuty(layout, ttl_s=config.status_cache_ttl_s)
        self.gc = GcDuty(layout)
        # The host CLIs probed at start and when a binary changes (loopx.hostcanary).
        self.canary = CanaryDuty(layout, self.env, python=config.python)
        # The root by directory descriptor; its path is checked every few seconds, so a root
        # moved away stops the fleet with a record (loopx.root.held).
        self._root: RootHandle | None = None
        self._next_root_check = 0.0
        self._root_moved = False
        # Duties a resource error (EMFILE, MemoryError...) stopped: retried each tick, never fatal.
        self.duties = Duties("supervisor")

    # --- intent (signal handlers and tests) -----------------------------------------------------

    def request_stop(self, exit_code: int = exitcodes.OK) -> None:
        """Stop the fleet; a second request forces (SIGKILL without waiting for the grace)."""
        self.stop_requests += 1
        if self.stop_requests == 1:
            self._stop_code = exit_code

    def request_reload(self) -> None:
        """Re-read the registry and the wanted agent count (``supervisor.scale.json``)."""
        self.reload_requested = True

    def handle_signal(self, signum: int, _frame: FrameType | None = None) -> None:
        """Record what a signal asks for; :meth:`tick` acts on it."""
        if signum == signal.SIGHUP:
            self.request_reload()
        elif signum == signal.SIGCHLD:
            self.child_event = True
        else:
            self.request_stop()

    # --- start ----------------------------------------------------------------------------------

    def start(self) -> None:
        """Lock the root, reap a previous fleet, recover, spawn the agents, and say READY=1.

        Raises:
            SupervisorRunningError: another supervisor runs on this root.

        """
        self._lock = acquire(self.layout)
        self._root = RootHandle(self.layout.root)
        # Heartbeats and the goals' times are dated on the files' clock; read them on it too.
        calibrate(self.layout.agents_dir)
        note = take_note(self.layout.root)
        if note is not None:
            log.warning(
                "previous_stop_root_moved",
                path=note.path,
                problem=note.problem,
                stopped_at=note.stopped_at.isoformat(),
                pid=note.pid,
            )
        previous = read_record(self.layout)
        self._write_record()  # a second supervisor now names our pid
        # --agents of this start is the truth; a scale file left by an earlier run is stale.
        scale_file(self.layout).unlink(missing_ok=True)
        process.become_subreaper()
        reap_previous(self.layout, previous, self.me.pid, self.config.stop_grace_s)
        self.status.previous_death(previous, me=self.me.pid)
        deferred = recover_turns(self.layout)
        if deferred is not None:
            self.publisher.degraded = deferred
        self.duties.run("refresh", self.status.refresh)
        self.runner.open()
        self.slots = [Slot(i, f"agent-{i}") for i in range(1, self.wanted + 1)]
        now = time.monotonic()
        for slot in self.slots:
            self._spawn(slot, now)
        self.state = FleetState.RUNNING
        self._write_record()
        self.notifier.ready(self._status_line())
        log.info(
            "supervisor_ready", agents=len(self.slots), pid=self.me.pid, backend=self.runner.name
        )

    def _check_root(self) -> bool:
        """Stop the fleet, saying why, once the root's path no longer names the directory opened.

        Returns:
            Whether the root moved (a stop is requested, once).
        """
        if self._root is None:
            return False
        problem = self._root.problem()
        if problem is None:
            return False
        if self._root_moved:
            return True
        self._root_moved = True
        log.error("root_moved", path=str(self.layout.root), problem=problem)
        try:
            self._root.write_note(problem)
        except OSError as e:
            log.warning("root_moved_note_failed", error=str(e))
        self.request_stop(exitcodes.FAILURE)
        return True

    # --- agents ---------------------------------------------------------------------------------

    def _spawn(self, slot: Slot, now: float) -> None:
        # A spawn a resource error refuses (no descriptor for the pipe or the log) is
        # tried again in a second, not at every wake-up.
        slot.next_start = now + _SPAWN_RETRY_S
        slot.agent = self.runner.spawn(slot.index, slot.agent_id)
        slot.spawned_at = now
        slot.next_start = None
        ref = slot.agent.ref
        log.info("agent_spawned", agent_id=slot.agent_id, pid=ref.pid if ref else None)

    def _heartbeat_age(self, slot: Slot) -> float:
        """Seconds since the slot's agent last proved alive (its heartbeat, else its spawn)."""
        since_spawn = time.monotonic() - slot.spawned_at
        try:
            beat = read_model_or_none(self.layout.agent_file(slot.agent_id), AgentHeartbeat)
        except CorruptFileError:
            beat = None
        ref = slot.ref
        if beat is None or ref is None or beat.pid != ref.pid:
            return since_spawn
        return min(since_spawn, (utcnow() - beat.beat_at).total_seconds())

    def _ended(self, slot: Slot, how: ExitStatus, now: float) -> None:
        about = working_on(self.layout.agent_file(slot.agent_id), slot.ref)
        log_exit(slot, how, self.layout.logs_dir / f"agent-{slot.index}.log", about)
        restart = self.state is FleetState.RUNNING and not slot.retiring
        settle_exit(slot, how, self.config.restart, now=now, restart=restart, about=about)

    def _check_slots(self, now: float) -> bool:
        """Reap, restart, kill stalled agents; returns whether anything changed."""
        changed = False
        for slot in list(self.slots):
            if slot.agent is not None:
                how = slot.agent.exit_status()
                if how is None and self.state is FleetState.RUNNING:
                    age = self._heartbeat_age(slot)
                    if age > self.config.stall_s:
                        log.error(
                            "agent_stalled",
                            agent_id=slot.agent_id,
                            silent_s=round(age, 1),
                            **working_on(self.layout.agent_file(slot.agent_id), slot.ref),
                        )
                        slot.agent.kill(grace_s=STALL_KILL_GRACE_S)
                        how = ExitStatus(
                            kind=ExitKind.STALLED, detail=f"heartbeat silent for {age:.0f}s"
                        )
                    elif slot.crash_loop and now - slot.spawned_at > self.config.restart.window_s:
                        slot.crash_loop, slot.recent_restarts, changed = False, 0, True
                if how is not None:
                    self._ended(slot, how, now)
                    changed = True
            elif (
                slot.next_start is not None
                and now >= slot.next_start
                and self.state is FleetState.RUNNING
            ):
                self._spawn(slot, now)
                changed = True
            if slot.retiring and slot.agent is None:
                self.slots.remove(slot)
                changed = True
        if self.child_event:
            self.child_event = False
            reap_orphans(known=[r.pid for s in self.slots if (r := s.ref) is not None])
        return changed

    # --- reload, stop, idle ---------------------------------------------------------------------

    def _reload(self, now: float) -> None:
        self.reload_requested = False
        self.notifier.reloading()
        try:
            goals = len(load_registry(self.layout).goals)
        except CorruptFileError as e:
            log.error("reload_registry_damaged", error=e.message)  # noqa: TRY400 - the message says it all
            goals = -1
        wanted = read_scale(self.layout)
        if wanted is not None:
            self.wanted = wanted
        for slot in resize(self.slots, self.wanted, now=now):
            if slot.agent is not None:
                slot.agent.request_stop()
        log.info("supervisor_reloaded", agents_wanted=self.wanted, goals=goals)
        self.notifier.send("READY=1", f"STATUS={self._status_line()}")

    def _begin_stop(self, now: float) -> None:
        self.state = FleetState.STOPPING
        self.exit_code = self._stop_code
        self._stop_deadline = now + self.config.stop_grace_s
        self.notifier.stopping(f"stopping {len(self._live())} agents")
        self.notifier.extend_timeout(self.config.stop_grace_s + 10)
        self._next_extend = now + 5
        for slot in self.slots:
            slot.next_start = None
            if slot.agent is not None:
                slot.agent.request_stop()
        log.info("supervisor_stopping", agents=len(self._live()), grace_s=self.config.stop_grace_s)

    def _live(self) -> list[Slot]:
        return [s for s in self.slots if s.agent is not None]

    def _finish(self) -> int:
        """Nothing of the fleet may survive: SIGKILL what is left, then record the end."""
        for slot in self.slots:
            if slot.agent is not None:
                slot.agent.kill(grace_s=0)
        self.runner.close(grace_s=0)
        self.canary.stop()
        clean = all(s.last_exit is None or s.last_exit.clean for s in self.slots)
        kill_leftovers(self.layout, self.me.pid, expected=clean)
        for slot in self.slots:
            slot.agent, slot.next_start = None, None
        self.status.join(2.0)
        self.state = FleetState.STOPPED
        self._write_record()
        code = self.exit_code if self.exit_code is not None else exitcodes.OK
        log.info("supervisor_stopped", exit_code=code)
        return code

    def _check_idle(self, now: float) -> None:
        code = self.idle.step(now, self.slots)
        if code is not None:
            self.request_stop(code)

    # --- one step -------------------------------------------------------------------------------

    def tick(self, now: float) -> int | None:
        """One step of the supervisor at monotonic time ``now``; the exit code once stopped.

        A file operation refused because the root was moved or swapped away (its path
        missing, a symlink now above it) stops the fleet as the periodic root check
        does, with ``root_moved`` logged and recorded, never with a traceback: the
        refusal often comes before that check is due.
        """
        try:
            return self._step(now)
        except (OSError, LoopxError):
            if not self._check_root():
                raise
            if self.state is FleetState.STOPPED:
                return self.exit_code if self.exit_code is not None else exitcodes.FAILURE
            return None

    def _step(self, now: float) -> int | None:
        if self.stop_requests and self.state is FleetState.RUNNING:
            self._begin_stop(now)
        if self.state is FleetState.STOPPING:
            self._duty("slots", lambda: self._check_slots(now))
            forced = self.stop_requests > 1 or now >= self._stop_deadline
            if forced or not self._live():
                return self._finish()
            if now >= self._next_extend:
                self.notifier.extend_timeout(max(0.0, self._stop_deadline - now) + 10)
                self._next_extend = now + 5
            return None
        if self.reload_requested:
            self._reload(now)
            self._write_record()
        # A Ray actor's pid becomes known after its spawn: publish it then too.
        retry_due = self.publisher.retry_at is not None and now >= self.publisher.retry_at
        degraded = self.duties.reason
        changed = self._duty("slots", lambda: self._check_slots(now))
        if changed or self._pids() != self._published_pids or retry_due:
            self._write_record()
        if self.notifier.watchdog_s is not None and now >= self._next_watchdog:
            self.notifier.watchdog()
            self._next_watchdog = now + self.notifier.watchdog_s
        self._run_duties(now, degraded)
        status = self._status_line()
        if status != self._last_status:
            self._last_status = status
            self.notifier.status(status)
        return None

    def _duty(self, name: str, step: Callable[[], T]) -> T | None:
        """One duty's pass; a failure because the root moved away stops the fleet, saying why.

        A spawn or a read under a root renamed or swapped away fails with
        ``FileNotFoundError`` (or a symlink refusal) before the 2-second root
        check sees it; that used to end the supervisor with a traceback and no
        record.
        """
        try:
            return self.duties.run(name, step)
        except (OSError, LoopxError):
            if self._check_root():
                return None
            raise

    def _run_duties(self, now: float, degraded: str | None) -> None:
        """The periodic duties, each weathering resource errors (``self.duties``)."""
        if now >= self._next_root_check:
            self._next_root_check = now + _ROOT_CHECK_S
            self.duties.run("root", self._check_root)
        if now >= self._next_refresh:
            self._next_refresh = now + self.config.refresh_interval_s
            self._duty("refresh", self.status.refresh)
        if self.idle.due(now):
            self._duty("idle", lambda: self._check_idle(now))
        if self.canary.due(now):
            self._duty("canary", lambda: self.canary.step(now))
        if self.gc.due(now):
            agents = [s.agent_id for s in self._live()]
            self._duty("gc", lambda: self.gc.step(now, wall=utcnow(), agents=agents))
        if self.duties.reason != degraded and self.publisher.retry_at is None:
            self._write_record()  # a duty began or stopped failing: the record says so

    def next_wait(self, now: float) -> float:
        """How long the loop may sleep before the next tick is due."""
        due = [now + self.config.tick_s]
        if self.notifier.watchdog_s is not None:
            due.append(self._next_watchdog)
        if self.state is FleetState.STOPPING:
            due.append(now + 0.1)
        if self.config.until_idle:
            due.append(self.idle.next_at)
        if self.publisher.retry_at is not None:
            due.append(self.publisher.retry_at)
        due += [s.next_start for s in self.slots if s.next_start is not None and s.agent is None]
        return max(0.0, min(due) - now)

    def _status_line(self) -> str:
        alive = len(self._live())
        loops = sum(1 for s in self.slots if s.crash_loop)
        text = f"{self.state}: {alive}/{self.wanted} agents alive"
        text += f", {loops} in crash loop" if loops else ""
        if self.status.goals is not None:
            text += f", {self.status.goals} goals"
        degraded = self.degraded_reason
        return text + (f"; degraded: {degraded}" if degraded else "")

    @property
    def degraded_reason(self) -> str | None:
        """Why the supervisor is degraded now: refused record writes, then failing duties."""
        parts = [p for p in (self.publisher.degraded, self.duties.reason) if p]
        return "; ".join(parts) or None

    def _pids(self) -> list[int | None]:
        return [r.pid if (r := s.ref) is not None else None for s in self.slots]

    def _write_record(self) -> None:
        """Publish ``supervisor.json``; a refused write degrades and is retried, never fatal."""
        self._published_pids = self._pids()
        record = FleetRecord(
            pid=self.me.pid,
            pid_started_at=self.me.started_at,
            hostname=os.uname().nodename,
            agents_wanted=self.wanted,
            visible=self.config.visible,
            tmux_session=self.runner.tmux_name,
            backend=self.runner.name,
            state=self.state,
            stop_grace_s=self.config.stop_grace_s,
            until_idle=self.config.until_idle,
            exit_code=self.exit_code if self.state is FleetState.STOPPED else None,
            started_at=self._started_wall,
            updated_at=utcnow(),
            slots=[s.record() for s in self.slots],
            degraded=self.duties.reason,
        )
        self.publisher.publish(record, root_moved=self._check_root, root=self._root)

    # --- the loop -------------------------------------------------------------------------------

    def run(self) -> int:
        """Start, then tick until stopped; returns the exit code. Main thread only."""
        return run_loop(self)

    def abandon(self) -> None:
        """After an error that ends the loop: a started fleet is ended and recorded as failed."""
        if self._lock is not None and self.state is not FleetState.STOPPED:
            self.exit_code = exitcodes.FAILURE
            with contextlib.suppress(Exception):
                self._finish()

    def close(self) -> None:
        """Release the notifier and the root's lock, whatever ended the loop."""
        self.notifier.close()
        if self._lock is not None:
            self._lock.release()  # type: ignore[attr-defined]
