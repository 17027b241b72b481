"""The supervisor: keeps N agents alive on one root; ``tick(now)`` is one step, ``run`` the loop.

Start: take ``supervisor.lock``; reap what a previous (SIGKILLed) supervisor
left (its recorded agents, and any process whose environment names this
root and an agent); run recovery; spawn the agents, each the leader of its
own session; ``READY=1``. Each tick: reap dead agents and restart them with
exponential backoff (a crash loop is recorded for a human), kill agents
whose heartbeat stalled, apply a requested stop or reload, ping the
watchdog, refresh the status projection and, with ``--until-idle``, stop
once no goal can progress. Signal handlers only record intent; ``tick``
acts on it.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import time
from collections.abc import Callable, Mapping
from datetime import timedelta
from types import FrameType
from typing import TYPE_CHECKING, Final, TypeVar

from loopx import exitcodes, process
from loopx.clock import calibrate
from loopx.errors import CorruptFileError, LoopxError, loop_fault, resource_fault
from loopx.fleet import (
    ACTIVE_STATES,
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
from loopx.root.watch import RootHandle, take_note
from loopx.storage.duties import Duties
from loopx.storage.files import atomic_write_model, read_model_or_none
from loopx.storage.resources import retry_delay
from loopx.supervisor.backends import make_runner
from loopx.supervisor.canary import CanaryDuty
from loopx.supervisor.config import SupervisorConfig
from loopx.supervisor.exits import log_exit, settle_exit, working_on
from loopx.supervisor.gcduty import GcDuty
from loopx.supervisor.idle import idle_verdict
from loopx.supervisor.leftovers import kill_leftovers, reap_previous
from loopx.supervisor.lock import acquire, read_record
from loopx.supervisor.memory import TRIM_AFTER_REREAD, return_freed_memory
from loopx.supervisor.notify import Notifier
from loopx.supervisor.process import reap_orphans
from loopx.supervisor.progress import goal_progress
from loopx.supervisor.runner import AgentRunner
from loopx.supervisor.scale import read_scale, scale_file
from loopx.supervisor.slot import Slot, resize
from loopx.turn.recovery import recover

if TYPE_CHECKING:
    from loopx.notify.deliver import NotifyDuty

log = get_logger(__name__)

STALL_KILL_GRACE_S: Final = 2.0
# The status refresh's scan of every goal's fingerprint (a stat per unchanged goal): every
# minute, or one goal per 1 / STATUS_SCAN_RATE s when that is longer (500 s at 100,000 goals),
# so an idle fleet's cost does not grow with the goals (hints make the scan a safety net).
STATUS_FULL_SCAN_S: Final = 60.0
STATUS_SCAN_RATE: Final = 200.0
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
        self._next_idle_check = 0.0
        self._idle_streak: int | None = None  # exit code seen idle at the previous check
        self._next_extend = 0.0
        self._last_status = ""
        self._published_pids: list[int | None] = []
        # Why writes are refused now (disk full...), None when healthy; the
        # supervisor keeps going and retries the record with backoff.
        self.degraded: str | None = None
        self._record_failures = 0
        self._record_retry_at: float | None = None
        self._goals: int | None = None  # goals in the last status refresh (for STATUS=)
        self.gc = GcDuty(layout)
        # The host CLIs probed at start and when a binary changes (loopx.hostcanary).
        self.canary = CanaryDuty(layout, self.env, python=config.python)
        # The root by directory descriptor; its path is checked every few seconds, so a root
        # moved away stops the fleet with a record (loopx.root.watch).
        self._root: RootHandle | None = None
        self._next_root_check = 0.0
        self._root_moved = False
        self._notify: NotifyDuty | None = None  # notifications, sent off the main thread
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
        self._notify_previous_death(previous)
        self._recover()
        self.duties.run("refresh", self._refresh_status)
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

    def _recover(self) -> None:
        try:
            report = recover(self.layout)
        except OSError as e:
            reason = resource_fault(e)
            if reason is None:
                raise
            # Agents recover each goal's journal at their next claim anyway.
            log.warning("recovery_deferred", reason=reason)
            self.degraded = reason
            return
        log.info(
            "recovery_done",
            actions=len(report.actions),
            quarantined=len(report.quarantined),
            busy_goals=report.busy_goals,
            errors=report.errors,
        )

    def _refresh_status(self) -> None:
        """Refresh the status projection (every ``--refresh-interval-seconds``, TTL from the config)."""
        from loopx.status.current import refresh_status, status_cache  # noqa: PLC0415 - heavy
        from loopx.status.watch import FingerprintMemo  # noqa: PLC0415 - with the cache

        try:
            cache = status_cache(self.layout)
            if cache.memo is None:
                # The once-a-minute full scan costs a stat per unchanged goal.
                cache.memo = FingerprintMemo()
                cache.keep_views = False  # the rows hold them; it prints none
            scan_s = max(STATUS_FULL_SCAN_S, (self._goals or 0) / STATUS_SCAN_RATE)
            report = refresh_status(
                self.layout,
                now=utcnow(),
                ttl_s=self.config.status_cache_ttl_s,
                full_scan_after_s=scan_s,
            )
            self._goals = report.goals
            if report.reread >= TRIM_AFTER_REREAD:
                return_freed_memory()  # the views it replaced, freed between the live ones
        except Exception as e:
            if loop_fault(e) is not None:
                raise  # the refresh duty is degraded, said in the status line and record
            log.warning("status_refresh_failed", error=str(e))
            return
        self._notify_duty()

    def _notify_previous_death(self, previous: FleetRecord | None) -> None:
        """A predecessor that died without a stop: its "down" and "recovered" notifications."""
        if previous is None or previous.state not in ACTIVE_STATES or previous.pid == self.me.pid:
            return
        from loopx.notify.incident import record_restart  # noqa: PLC0415 - only after a death

        try:
            events = record_restart(
                self.layout, pid=previous.pid, last_heard=previous.updated_at, now=utcnow()
            )
        except Exception as e:  # noqa: BLE001 - notifications must never stop the fleet
            log.warning("notify_restart_failed", error=str(e))
            return
        if events:
            log.info("notify_previous_death", pid=previous.pid, events=len(events))

    def _notify_duty(self) -> None:
        """Hand the fresh projection to the notifications, which send from a background thread."""
        from loopx.notify.deliver import NotifyDuty  # noqa: PLC0415 - only with notifications
        from loopx.status.current import current_status  # noqa: PLC0415 - heavy

        if not NotifyDuty.wanted(self.layout):
            return
        try:
            if self._notify is None:
                self._notify = NotifyDuty(self.layout)
            # Just refreshed: the cached projection answers without a scan.
            projection = current_status(self.layout, now=utcnow())
            self._notify.kick(projection, utcnow())
        except Exception as e:  # noqa: BLE001 - notifications must never stop the fleet
            log.warning("notify_duty_failed", error=str(e))

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
        if self._notify is not None:
            self._notify.join(2.0)  # a send in flight may finish; the outbox resends it if not
        self.state = FleetState.STOPPED
        self._write_record()
        code = self.exit_code if self.exit_code is not None else exitcodes.OK
        log.info("supervisor_stopped", exit_code=code)
        return code

    def _check_idle(self, now: float) -> None:
        self._next_idle_check = now + self.config.idle_check_s
        # The goals' next-eligible times are in the fleet's clock (agents calibrate theirs
        # against the files'); judged by this process's own clock, an hour behind, a goal
        # waiting 20 s looked an hour away and the run ended as blocked.
        calibrate(self.layout.agents_dir)
        wall = utcnow()
        live_slots = [s for s in self.slots if not s.retiring]
        fleet_dead = bool(live_slots) and all(s.crash_loop for s in live_slots)
        verdict = idle_verdict(
            goal_progress(self.layout, now=wall),
            now=wall,
            horizon=timedelta(seconds=self.config.idle_horizon_s),
            fleet_dead=fleet_dead,
        )
        if not verdict.idle:
            self._idle_streak = None
            return
        # Two idle checks in a row with the same answer: a goal between two of an
        # agent's file writes must not end the run.
        if self._idle_streak == verdict.exit_code:
            log.info(
                "fleet_idle",
                exit_code=verdict.exit_code,
                outcomes={k: str(v) for k, v in verdict.outcomes.items()},
            )
            self.request_stop(verdict.exit_code)
        self._idle_streak = verdict.exit_code

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
        retry_due = self._record_retry_at is not None and now >= self._record_retry_at
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
            self._duty("refresh", self._refresh_status)
        if self.config.until_idle and now >= self._next_idle_check:
            self._duty("idle", lambda: self._check_idle(now))
        if self.canary.due(now):
            self._duty("canary", lambda: self.canary.step(now))
        if self.gc.due(now):
            agents = [s.agent_id for s in self._live()]
            self._duty("gc", lambda: self.gc.step(now, wall=utcnow(), agents=agents))
        if self.duties.reason != degraded and self._record_retry_at is None:
            self._write_record()  # a duty began or stopped failing: the record says so

    def next_wait(self, now: float) -> float:
        """How long the loop may sleep before the next tick is due."""
        due = [now + self.config.tick_s]
        if self.notifier.watchdog_s is not None:
            due.append(self._next_watchdog)
        if self.state is FleetState.STOPPING:
            due.append(now + 0.1)
        if self.config.until_idle:
            due.append(self._next_idle_check)
        if self._record_retry_at is not None:
            due.append(self._record_retry_at)
        due += [s.next_start for s in self.slots if s.next_start is not None and s.agent is None]
        return max(0.0, min(due) - now)

    def _status_line(self) -> str:
        alive = len(self._live())
        loops = sum(1 for s in self.slots if s.crash_loop)
        text = f"{self.state}: {alive}/{self.wanted} agents alive"
        text += f", {loops} in crash loop" if loops else ""
        if self._goals is not None:
            text += f", {self._goals} goals"
        degraded = self.degraded_reason
        return text + (f"; degraded: {degraded}" if degraded else "")

    @property
    def degraded_reason(self) -> str | None:
        """Why the supervisor is degraded now: refused record writes, then failing duties."""
        parts = [p for p in (self.degraded, self.duties.reason) if p]
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
        try:
            atomic_write_model(self.layout.supervisor_file, record)
        except (OSError, MemoryError, LoopxError) as e:
            reason = loop_fault(e) if isinstance(e, OSError | MemoryError) else None
            if reason is None:
                if self._check_root():
                    # The path refuses the write (gone, or a symlink above it now): the
                    # record goes where the note went, into the directory opened.
                    self._record_in_moved_root(record)
                    return
                raise
            self._record_failures += 1
            delay = retry_delay(self._record_failures)
            self._record_retry_at = time.monotonic() + delay
            if self.degraded != reason:
                log.warning("supervisor_degraded", reason=reason, retry_in_s=delay)
            self.degraded = reason
            return
        if self.degraded is not None:
            log.info("supervisor_recovered", was=self.degraded, failures=self._record_failures)
        self.degraded, self._record_failures, self._record_retry_at = None, 0, None

    def _record_in_moved_root(self, record: FleetRecord) -> None:
        """Write ``supervisor.json`` through the root's descriptor, so its end is recorded."""
        if self._root is None:
            return
        data = record.model_dump_json(indent=2).encode() + b"\n"
        try:
            self._root.write_file(self.layout.supervisor_file.name, data)
        except OSError as e:
            log.warning("root_moved_record_failed", error=str(e))

    # --- the loop -------------------------------------------------------------------------------

    def run(self) -> int:
        """Start, then tick until stopped; returns the exit code. Main thread only."""
        read_fd, write_fd = os.pipe()
        os.set_blocking(read_fd, False)
        os.set_blocking(write_fd, False)
        old_wakeup = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        handled = (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD)
        old_handlers = {s: signal.signal(s, self.handle_signal) for s in handled}
        old_handlers[signal.SIGINT] = process.own_sigint(self.handle_signal)
        # Started by `supervisor start`, we inherit the spawner's blocked mask (see process.spawn).
        process.unblock_handled_signals()
        try:
            self.start()
            while True:
                now = time.monotonic()
                code = self.tick(now)
                if code is not None:
                    return code
                with contextlib.suppress(InterruptedError):
                    select.select([read_fd], [], [], self.next_wait(time.monotonic()))
                with contextlib.suppress(BlockingIOError):
                    while os.read(read_fd, 512):
                        pass
        except BaseException:
            if self._lock is not None and self.state is not FleetState.STOPPED:
                self.exit_code = exitcodes.FAILURE
                with contextlib.suppress(Exception):
                    self._finish()
            raise
        finally:
            for signum, handler in old_handlers.items():
                signal.signal(signum, handler)
            signal.set_wakeup_fd(old_wakeup)
            os.close(read_fd)
            os.close(write_fd)
            self.notifier.close()
            if self._lock is not None:
                self._lock.release()  # type: ignore[attr-defined]
