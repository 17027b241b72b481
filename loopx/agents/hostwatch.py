"""One started host: its pipes served, its tree sampled and judged, then killed or reaped.

:func:`loopx.agents.hostrun.run_host` starts the host and hands it here. One
loop in the calling thread waits on the host's pidfd and its pipes together
(``select``) and wakes at each sample or tick; what to do is asked of the pure
decisions in :mod:`loopx.agents.hostlimits`, and done here: a kill of the
whole tree, the sweep of what the host left, its exit status and rusage.
"""

from __future__ import annotations

import contextlib
import functools
import os
import resource
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import Final

from loopx.agents.activity import newest_mtime
from loopx.agents.hostlimits import (
    FIRST_SAMPLE_S,
    MB,
    Limits,
    Observation,
    kill_reason,
    next_period,
    next_wait,
)
from loopx.agents.hostpipes import Capture, Pipes
from loopx.agents.hostsweep import leftovers, sweep
from loopx.agents.hosttree import Tree
from loopx.log import get_logger
from loopx.model import utcnow
from loopx.process import child_running, kill_tree, running
from loopx.turn.failures import FailureReason

log = get_logger(__name__)

# How long output still held by a pipe is read after the host tree ended.
_DRAIN_S: Final = 5.0


class RunningHost:
    """One started host: its pipes, pidfd and tree, and the effects the decisions ask for."""

    def __init__(
        self,
        proc: subprocess.Popen[bytes],
        stdin: bytes,
        tree: Tree,
        limits: Limits,
        before: set[int] | None,
        *,
        tee: Callable[[bytes], None] | None = None,
        echo: Callable[[str, bytes], None] | None = None,
    ) -> None:
        self.proc = proc
        self.tree = tree
        self.limits = limits
        # Our children before the host started (not its leftovers); None: we
        # could not become a subreaper, so leftovers are found by their turn key.
        self.reaper = before is not None
        self.before = before or set()
        self.out, self.err = Capture(tee=tee), Capture(tee=tee)
        if echo is not None:
            self.out.echo = functools.partial(echo, "stdout")
            self.err.echo = functools.partial(echo, "stderr")
        self.pipes = Pipes(proc, stdin, self.out, self.err)
        try:
            self.pidfd: int | None = os.pidfd_open(proc.pid)
        except (AttributeError, OSError):  # pragma: no cover - old kernels
            self.pidfd = None
        self.t0 = time.monotonic()
        self.wall_s = 0.0
        self.watched = False  # ended because the adapter's watch saw it stuck
        self.file_at = 0.0  # when a file of its activity paths last moved (monotonic)
        self.error: BaseException | None = None

    def to_end(
        self,
        stop: threading.Event | None,
        tick: Callable[[], None] | None,
        tick_every_s: float,
        *,
        stuck: Callable[[Capture, Capture], bool] | None = None,
    ) -> tuple[FailureReason | None, datetime, resource.struct_rusage]:
        """Watch the host to its end, then reap it: why it was killed, when it ended, its rusage.

        The pidfd and pipes are released however this ends (:meth:`close`).
        """
        try:
            killed = self.watch(stop, tick, tick_every_s, stuck=stuck)
            ended = utcnow()
            return killed, ended, self.reap(killed)
        finally:
            self.close()

    def watch(
        self,
        stop: threading.Event | None,
        tick: Callable[[], None] | None,
        tick_every_s: float,
        *,
        stuck: Callable[[Capture, Capture], bool] | None = None,
    ) -> FailureReason | None:
        """Serve the pipes and sample until the host exits or must be killed; return why killed.

        ``stuck`` (the adapter's watch) sees the output at each sample; True
        ends the host without a kill reason (``watched``).
        """
        next_tick = self.t0 + tick_every_s if tick is not None else float("inf")
        period = FIRST_SAMPLE_S
        next_sample = self.t0 + period
        rss = 0
        cap = self.limits.max_rss_mb * MB if self.limits.max_rss_mb is not None else None
        killed: FailureReason | None = None
        while killed is None:
            now_m = time.monotonic()
            wait = next_wait(
                min(next_sample, next_tick) - now_m,
                now_m - self.t0,
                self.limits,
                stoppable=stop is not None,
            )
            if self.pipes.serve(self.pidfd, wait) or not child_running(self.proc.pid):
                break
            now_m = time.monotonic()
            sampled = now_m >= next_sample
            if sampled:
                seen = self.tree.sample()
                rss = seen.rss_bytes
                near_cap = cap is not None and rss > cap / 2
                period = next_period(period, changed=seen.changed, near_cap=near_cap)
                next_sample = now_m + period
            observed = Observation(
                elapsed_s=now_m - self.t0,
                rss_bytes=rss,
                stop_requested=stop is not None and stop.is_set(),
                quiet_s=now_m - max(self.t0, self.out.last_at or 0.0, self.err.last_at or 0.0,
                                    self.file_at),
            )  # fmt: skip
            killed = kill_reason(observed, self.limits)
            if killed is FailureReason.HOST_STALLED and self._wrote_files(now_m):
                killed = None  # its files moved since: quiet on its pipes, not stalled
            if killed is None and tick is not None and now_m >= next_tick:
                next_tick = now_m + tick_every_s
                try:
                    tick()
                except Exception as e:  # noqa: BLE001 - re-raised after the tree is gone
                    self.error, killed = e, FailureReason.LEASE_LOST
            if killed is None and sampled and stuck is not None and stuck(self.out, self.err):
                self.watched = True
                break
        if killed is not None or self.watched:
            self._terminate()
        self.wall_s = time.monotonic() - self.t0
        return killed

    def _wrote_files(self, now_m: float) -> bool:
        """Whether a file of ``activity_paths`` moved since the last sign of life.

        Read only when the pipes have been quiet past the stall timeout: one walk per spell.
        """
        newest = newest_mtime(self.limits.activity_paths)
        if newest is None:
            return False
        at_m = now_m - max(0.0, time.time() - newest)  # the wall clock's mtime, on our clock
        if at_m <= max(self.t0, self.file_at):
            return False
        self.file_at = at_m
        return now_m - at_m <= (self.limits.stall_timeout_s or 0.0)

    def reap(self, killed: FailureReason | None) -> resource.struct_rusage:
        """Sweep what the host left, then collect its exit status and rusage."""
        pid = self.proc.pid
        if self.reaper:
            found = leftovers(self.before, pid, self.tree)
            if found:
                self.tree.sample(extra=found)  # their CPU counts towards the turn
                count = sweep(self.before, pid, self.tree, grace_s=self.limits.kill_grace_s)
                log.info("host_leftovers_killed", pid=pid, processes=count)
        elif killed is None and (self.tree.forked or self.pipes.held_elsewhere()):
            # No subreaper (not Linux): find what setsid'd away by its turn key.
            found = [p for p in [*self.tree.descendants(), *self.tree.marked()] if p.pid != pid]
            if found:
                self.tree.sample(scan_marked=True)
                kill_tree(found, pgid=pid, grace_s=self.limits.kill_grace_s)
                log.info("host_leftovers_killed", pid=pid, processes=len(found))
        # Whatever is still in the host's group goes now; the group id is safe
        # to use while the (zombie) leader is not yet reaped.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        _, status, rusage = os.wait4(self.proc.pid, 0)
        self.proc.returncode = os.waitstatus_to_exitcode(status)
        return rusage

    def close(self) -> None:
        """Release the pidfd and pipes; kill and reap the host if an error cut the run short."""
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None
        if self.proc.returncode is None and child_running(self.proc.pid):  # an exception above
            self._terminate()
            with contextlib.suppress(ChildProcessError):
                os.wait4(self.proc.pid, 0)
        # What the tree wrote before it ended; bounded like the old reader threads' join.
        with contextlib.suppress(OSError, ValueError):
            self.pipes.drain(time.monotonic() + _DRAIN_S)
        self.pipes.close()

    def _terminate(self) -> None:
        """Kill the whole tree: the group, every descendant, every marked process."""
        tree, pid = self.tree, self.proc.pid
        tree.sample(scan_marked=True)
        found = {p.pid: p for p in [*tree.descendants(), *tree.marked()] if p.pid != pid}
        kill_tree(found.values(), pgid=pid, grace_s=self.limits.kill_grace_s, child_pid=pid)
        # Something forked while we were killing: one more sweep, straight to SIGKILL.
        late = [p for p in tree.marked() if p.pid != pid and running(p)]
        if late:
            kill_tree(late, grace_s=0.0)
        log.info("host_tree_killed", pid=pid, processes=len(found) + 1)
