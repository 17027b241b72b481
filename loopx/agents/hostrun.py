"""Run one host process tree: spawn, feed, capture (bounded), measure, enforce, reap.

The host runs from its argv (never a shell) in its own session and process
group, with cwd = the goal's workdir and the envelope on stdin. One loop in
the calling thread waits on the host's pidfd and its pipes together
(``select``): it feeds stdin, reads stdout and stderr as they fill (keeping
the first 1 MiB of each and counting the rest, so a chatty host can neither
fill memory nor block on a full pipe) and wakes the moment the host exits, so
a short host costs no polling latency and no thread start-ups. Whether to
kill the running host is one pure decision (:func:`kill_reason`) over what
the loop knows at each wake-up; :func:`run_host` is the shell around it.

Watching is nearly free: the tree is sampled at intervals that start at
10 ms and back off to 1 s while it is quiet (:func:`next_period`), each
sample reading only the tree's own processes (:mod:`loopx.agents.hosttree`),
so a host that sleeps costs its agent well under 1% of a core, however many
other processes the machine runs (``benchmarks/host_watch.py``).

Nothing outlives its turn: while the host runs this process is a child
subreaper (:func:`loopx.process.subreaper`), so whatever the host leaves
behind, however fast it detaches, is reparented to us and swept when the
host exits. At enforcement the tree is also found through every process
carrying this turn's ``LOOPX_TURN_KEY`` and this run's ``LOOPX_HOST_RUN``.

Usage: CPU is the direct child's ``wait4`` rusage (which includes every
descendant it waited for) plus the last sample of descendants that were
orphaned (and so never waited for inside the tree); peak RSS is the largest
summed RSS of a sample, or any one process's own high-water mark if larger.
"""

from __future__ import annotations

import contextlib
import functools
import os
import resource
import secrets
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Final

from loopx import environ
from loopx.agents.activity import newest_mtime
from loopx.agents.hostguard import HostGuard, guard_for_run
from loopx.agents.hostpipes import Capture, Pipes
from loopx.agents.hosttree import Tree, leftovers, own_children, sweep
from loopx.log import get_logger
from loopx.model import utcnow
from loopx.process import child_running, kill_tree, running, subreaper
from loopx.turn.failures import FailureReason
from loopx.usage import Usage

log = get_logger(__name__)

DEFAULT_KILL_GRACE_S: Final = 3.0
# How long output still held by a pipe is read after the host tree ended.
_DRAIN_S: Final = 5.0
_MB: Final = 1024 * 1024
# The tree is looked at first after 10 ms (short hosts are common), then at
# doubling intervals, up to 0.1 s while it changes and 1 s while it is quiet
# (:func:`next_period`). A stop request is checked every 50 ms in the host's
# first second, every 0.25 s after: each check is a wake-up of this process,
# which costs more than the check (about 0.1 ms on a loaded machine).
_FIRST_SAMPLE_S: Final = 0.01
_BUSY_PERIOD_S: Final = 0.1
_QUIET_PERIOD_S: Final = 1.0
_STOP_CHECK_S: Final = 0.05
_STOP_CHECK_LATER_S: Final = 0.25
_STOP_CHECK_FAST_FOR_S: Final = 1.0


@dataclass(frozen=True, slots=True)
class Limits:
    """Enforcement limits of one host run."""

    timeout_s: float
    max_rss_mb: float | None = None
    kill_grace_s: float = DEFAULT_KILL_GRACE_S
    stall_timeout_s: float | None = None  # no output for this long: stalled (None: never)
    # Files or folders the host is known to write (its session records): a file in them
    # modified within the stall timeout is a sign of life too.
    activity_paths: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class HostRun:
    """What a host run left: exit, output, usage, and why it was killed (if it was)."""

    pid: int
    exit_code: int | None
    signal: int | None
    stdout: Capture
    stderr: Capture
    usage: Usage
    killed: FailureReason | None
    started_at: datetime
    ended_at: datetime
    spawn_error: str | None = None  # the program could not be started at all
    watched: bool = False  # stopped because ``watch`` said its output shows it is stuck


@dataclass(frozen=True, slots=True)
class Observation:
    """What the watch loop knows of a running host when it wakes (RSS: the last sample)."""

    elapsed_s: float
    rss_bytes: int
    stop_requested: bool
    quiet_s: float = 0.0  # since the host last wrote to stdout or stderr (or started)


def kill_reason(seen: Observation, limits: Limits) -> FailureReason | None:
    """Why a running host must be killed now, or None to let it run. Pure."""
    if seen.stop_requested:
        return FailureReason.STOPPED
    if seen.elapsed_s > limits.timeout_s:
        return FailureReason.TURN_TIMEOUT
    if limits.stall_timeout_s is not None and seen.quiet_s > limits.stall_timeout_s:
        return FailureReason.HOST_STALLED
    if limits.max_rss_mb is not None and seen.rss_bytes > limits.max_rss_mb * _MB:
        return FailureReason.QUOTA_MEMORY_EXCEEDED
    return None


def next_period(period: float, *, changed: bool, near_cap: bool) -> float:
    """How long from this sample of the tree to the next. Pure.

    The period doubles: up to 0.1 s while the tree changes (a process came or
    went, the summed RSS moved by more than an eighth) or holds more than
    half its memory cap, up to 1 s while it is quiet. A change after a quiet
    spell brings it back to 0.1 s at once.
    """
    return min(period * 2, _BUSY_PERIOD_S if changed or near_cap else _QUIET_PERIOD_S)


def next_wait(until_due_s: float, elapsed_s: float, limits: Limits, *, stoppable: bool) -> float:
    """How long to serve the pipes before looking again. Pure.

    Until the next sample or tick is due (``until_due_s``), never past the
    timeout; when a stop may be requested, at most 50 ms in the host's first
    second and 0.25 s after (checking the stop costs a wake-up, not a sample).
    """
    wait = min(max(until_due_s, 0.0), max(limits.timeout_s - elapsed_s, 0.0) + 0.001)
    if not stoppable:
        return wait
    fast = elapsed_s < _STOP_CHECK_FAST_FOR_S
    return min(wait, _STOP_CHECK_S if fast else _STOP_CHECK_LATER_S)


def run_host(
    argv: list[str],
    *,
    stdin: bytes,
    cwd: Path,
    env: Mapping[str, str],
    limits: Limits,
    turn_key: str,
    loopx_root: str,
    stop: threading.Event | None = None,
    tick: Callable[[], None] | None = None,
    tick_every_s: float = 10.0,
    tee: Callable[[bytes], None] | None = None,
    watch: Callable[[Capture, Capture], bool] | None = None,
    echo: Callable[[str, bytes], None] | None = None,
) -> HostRun:
    """Run a host to its end (or kill it) and report what happened.

    Args:
        argv: program and arguments; never given to a shell.
        stdin: the envelope bytes.
        cwd: the goal's workdir.
        env: the full environment (must carry LOOPX_TURN_KEY and LOOPX_ROOT).
        limits: timeout, memory cap, kill grace.
        turn_key: this turn's key, for finding escaped descendants.
        loopx_root: the runtime root, likewise.
        stop: when set, the host is terminated and the run ends ``stopped``.
        tick: called every ``tick_every_s`` while the host runs (lease renewal);
            if it raises, the tree is killed and the error propagates.
        tick_every_s: the tick period.
        tee: given every chunk of stdout and stderr as it arrives (the live tail).
        watch: called with the output so far at each sample; True stops the
            host (``watched``), whose output the adapter then reads as usual.
        echo: called with ``"stdout"``/``"stderr"`` and each chunk as it is read.

    Returns:
        The run; a program that cannot start gives ``spawn_error``.

    """
    started = utcnow()
    run_id = secrets.token_hex(8)
    # Before the subreaper's census, so the guard is never taken for a leftover.
    guard = guard_for_run(run_id, grace_s=limits.kill_grace_s)
    with subreaper() as reaping, _released(guard):
        before = own_children() if reaping else None
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=cwd,
                env={**env, environ.HOST_RUN: run_id},
                start_new_session=True,
                close_fds=True,
            )
        except OSError as e:
            return _not_started(argv, cwd, e, started)
        guard.watch(proc.pid)
        tree = Tree(proc.pid, turn_key, loopx_root, run_id)
        run = _Running(proc, stdin, tree, limits, before, tee=tee, echo=echo)
        try:
            killed = run.watch(stop, tick, tick_every_s, stuck=watch)
            ended = utcnow()
            rusage = run.reap(killed)
        finally:
            run.close()
    if run.error is not None:
        raise run.error
    cpu = rusage.ru_utime + rusage.ru_stime + run.tree.orphan_cpu()
    # The tree's samples only: the host's own ru_maxrss counts the forked agent's
    # pages before exec (45 MB for a sleeping `sh`), so the peak and the cap
    # (kill_reason) read one measurement; the peak also holds each process's own
    # high-water mark, which a spike between two samples leaves behind.
    peak = run.tree.peak_rss
    code = proc.returncode
    return HostRun(
        pid=proc.pid,
        exit_code=code if code >= 0 else None,
        signal=-code if code < 0 else None,
        stdout=run.out,
        stderr=run.err,
        usage=Usage(cpu_s=cpu, wall_s=run.wall_s, peak_rss_mb=peak / _MB),
        killed=killed,
        started_at=started,
        ended_at=ended,
        watched=run.watched,
    )


@contextlib.contextmanager
def _released(guard: HostGuard) -> Iterator[None]:
    """Tell ``guard`` the run is over (swept, reaped), however the block ends."""
    try:
        yield
    finally:
        guard.release()


def _not_started(argv: list[str], cwd: Path, error: OSError, started: datetime) -> HostRun:
    return HostRun(
        pid=0,
        exit_code=None,
        signal=None,
        stdout=Capture(),
        stderr=Capture(),
        usage=Usage(),
        killed=None,
        started_at=started,
        ended_at=utcnow(),
        spawn_error=f"cannot start {argv[0]!r} in {cwd}: {error.strerror or error}",
    )


class _Running:
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
        period = _FIRST_SAMPLE_S
        next_sample = self.t0 + period
        rss = 0
        cap = self.limits.max_rss_mb * _MB if self.limits.max_rss_mb is not None else None
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
        pid, key = self.proc.pid, self.tree.turn_key
        if self.reaper:
            found = leftovers(self.before, pid, key)
            if found:
                self.tree.sample(extra=found)  # their CPU counts towards the turn
                count = sweep(self.before, pid, key, grace_s=self.limits.kill_grace_s)
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
