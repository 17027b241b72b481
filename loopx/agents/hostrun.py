"""Run one host process tree: spawn, feed, capture (bounded), measure, enforce, reap.

The host runs from its argv (never a shell) in its own session and process
group, with cwd = the goal's workdir and the envelope on stdin. One loop in
the calling thread waits on the host's pidfd and its pipes together
(``select``): it feeds stdin, reads stdout and stderr as they fill (keeping
the first 1 MiB of each and counting the rest, so a chatty host can neither
fill memory nor block on a full pipe) and wakes the moment the host exits, so
a short host costs no polling latency and no thread start-ups. Whether to
kill the running host is one pure decision (:func:`kill_reason`) over what
each sample saw; :func:`run_host` is the shell around it.

Nothing outlives its turn: while the host runs this process is a child
subreaper (:func:`loopx.process.subreaper`; the tree: :mod:`loopx.agents.hosttree`), so
whatever the host leaves behind, however fast it detaches, is reparented to us
and swept when the host exits.
At enforcement the tree is also found through every process carrying this
turn's ``LOOPX_TURN_KEY`` and this run's ``LOOPX_HOST_RUN``.

Usage: CPU is the direct child's ``wait4`` rusage (which includes every
descendant it waited for) plus the last sample of descendants that were
orphaned (and so never waited for inside the tree); peak RSS is the largest
summed RSS of a sample, or the rusage maxrss if larger.
"""

from __future__ import annotations

import contextlib
import functools
import os
import resource
import secrets
import select
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import IO, Final

from loopx import environ
from loopx.agents.hostguard import HostGuard, guard_for_run
from loopx.agents.hosttree import Tree, leftovers, own_children, sweep
from loopx.log import get_logger
from loopx.model import utcnow
from loopx.process import child_running, kill_tree, running, subreaper
from loopx.turn.failures import FailureReason
from loopx.turn.journal import OUTPUT_LIMIT_BYTES
from loopx.usage import Usage

log = get_logger(__name__)

DEFAULT_KILL_GRACE_S: Final = 3.0
_READ_CHUNK: Final = 64 * 1024
# How long output still held by a pipe is read after the host tree ended.
_DRAIN_S: Final = 5.0
_MB: Final = 1024 * 1024
# Sampling starts fast (short hosts are common) and slows to this period.
_FIRST_SAMPLE_S: Final = 0.01
_SAMPLE_PERIOD_S: Final = 0.1


@dataclass(frozen=True, slots=True)
class Limits:
    """Enforcement limits of one host run."""

    timeout_s: float
    max_rss_mb: float | None = None
    kill_grace_s: float = DEFAULT_KILL_GRACE_S


@dataclass(slots=True)
class Capture:
    """One output stream: the first ``limit`` bytes kept, the rest counted.

    ``tee`` and ``echo`` are views and must not raise: a raise here ends the
    host before its outcome is recorded, and recovery runs it again.
    """

    limit: int = OUTPUT_LIMIT_BYTES
    kept: bytearray = field(default_factory=bytearray)
    dropped: int = 0
    tee: Callable[[bytes], None] | None = None  # also sees every chunk (the live tail)
    echo: Callable[[bytes], None] | None = None  # shown live (an agent's console)

    def feed(self, chunk: bytes) -> None:
        """Keep what fits under the limit, count the rest."""
        if self.tee is not None:
            self.tee(chunk)
        if self.echo is not None:
            self.echo(chunk)
        room = self.limit - len(self.kept)
        if room > 0:
            self.kept += chunk[:room]
        self.dropped += max(len(chunk) - max(room, 0), 0)

    def text(self) -> str:
        """The kept bytes, decoded with replacement."""
        return self.kept.decode("utf-8", errors="replace")


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


class _Pipes:
    """The host's three pipes, served from one ``select`` loop in the calling thread."""

    def __init__(
        self, proc: subprocess.Popen[bytes], stdin: bytes, out: Capture, err: Capture
    ) -> None:
        # PIPEs were asked for all three.
        assert proc.stdin is not None  # noqa: S101
        assert proc.stdout is not None  # noqa: S101
        assert proc.stderr is not None  # noqa: S101
        self._pid = proc.pid
        self._files: list[IO[bytes]] = [proc.stdin, proc.stdout, proc.stderr]
        self._readers: dict[int, Capture] = {proc.stdout.fileno(): out, proc.stderr.fileno(): err}
        self._stdin_fd: int | None = proc.stdin.fileno()
        self._stdin = memoryview(stdin)
        for fd in (self._stdin_fd, *self._readers):
            os.set_blocking(fd, False)
        if not stdin:
            self._close_stdin()

    def serve(self, pidfd: int | None, timeout: float) -> bool:
        """Move bytes until the host exits (True) or ``timeout`` passes (False); never reaps.

        Without a pidfd (kernels before 5.3) the exit is polled every 5 ms.
        """
        deadline = time.monotonic() + max(timeout, 0.0)
        while True:
            left = deadline - time.monotonic()
            waits = [*self._readers] + ([pidfd] if pidfd is not None else [])
            writes = [self._stdin_fd] if self._stdin_fd is not None else []
            cap = left if pidfd is not None else min(left, 0.005)
            try:
                readable, writable, _ = select.select(waits, writes, [], max(cap, 0.0))
            except InterruptedError:  # pragma: no cover - PEP 475 retries; kept for clarity
                continue
            if writable:
                self._feed()
            for fd in readable:
                if fd != pidfd:
                    self._read(fd)
            exited = pidfd in readable if pidfd is not None else not child_running(self._pid)
            if exited:
                return True
            if time.monotonic() >= deadline:
                return False

    def held_elsewhere(self) -> bool:
        """After the host exited: whether another process still holds its stdout or stderr.

        Reads what is buffered; a pipe that is then empty but not at EOF has a
        writer left, and the host's own descriptors are closed before its
        pidfd reports the exit, so that writer is a descendant that outlived
        it (a ``setsid`` grandchild inherits the pipes), found without a scan.
        """
        for fd in list(self._readers):
            while fd in self._readers:
                try:
                    chunk = os.read(fd, _READ_CHUNK)
                except BlockingIOError:
                    return True
                except OSError:
                    chunk = b""
                if chunk:
                    self._readers[fd].feed(chunk)
                else:
                    del self._readers[fd]
        return False

    def drain(self, deadline: float) -> None:
        """After the host exited: read what its pipes still hold until EOF or ``deadline``."""
        self._close_stdin()
        while self._readers:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            readable, _, _ = select.select([*self._readers], [], [], left)
            for fd in readable:
                self._read(fd)

    def close(self) -> None:
        """Close our ends of every pipe."""
        for f in self._files:
            with contextlib.suppress(OSError):
                f.close()
        self._readers.clear()
        self._stdin_fd = None

    def _read(self, fd: int) -> None:
        try:
            chunk = os.read(fd, _READ_CHUNK)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if chunk:
            self._readers[fd].feed(chunk)
        else:
            del self._readers[fd]  # EOF: every writer closed it

    def _feed(self) -> None:
        # A host that never reads stdin (or exits early) must not fail the turn.
        try:
            sent = os.write(self._stdin_fd, self._stdin[:_READ_CHUNK])  # type: ignore[arg-type]
        except BlockingIOError:
            return
        except OSError:  # BrokenPipeError: the host closed its stdin
            self._close_stdin()
            return
        self._stdin = self._stdin[sent:]
        if not self._stdin:
            self._close_stdin()

    def _close_stdin(self) -> None:
        if self._stdin_fd is not None:
            with contextlib.suppress(OSError):
                self._files[0].close()
            self._stdin_fd = None


@dataclass(frozen=True, slots=True)
class Observation:
    """What one sample of a running host saw."""

    elapsed_s: float
    rss_bytes: int
    stop_requested: bool


def kill_reason(seen: Observation, limits: Limits) -> FailureReason | None:
    """Why a running host must be killed now, or None to let it run. Pure."""
    if seen.stop_requested:
        return FailureReason.STOPPED
    if seen.elapsed_s > limits.timeout_s:
        return FailureReason.TURN_TIMEOUT
    if limits.max_rss_mb is not None and seen.rss_bytes > limits.max_rss_mb * _MB:
        return FailureReason.QUOTA_MEMORY_EXCEEDED
    return None


def next_wait(period: float, elapsed_s: float, limits: Limits, *, stoppable: bool) -> float:
    """How long to serve the pipes before the next sample. Pure.

    Never past the timeout; at most 50 ms when a stop may be requested.
    """
    wait = min(period, max(limits.timeout_s - elapsed_s, 0.0) + 0.001)
    return min(wait, 0.05) if stoppable else wait


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
    # The tree's psutil samples only: the host's own ru_maxrss counts the forked
    # agent's pages before exec (45 MB for a sleeping `sh`, issue 29), so the peak,
    # the cap (kill_reason) and the report all read one measurement.
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
        self.pipes = _Pipes(proc, stdin, self.out, self.err)
        try:
            self.pidfd: int | None = os.pidfd_open(proc.pid)
        except (AttributeError, OSError):  # pragma: no cover - old kernels
            self.pidfd = None
        self.t0 = time.monotonic()
        self.wall_s = 0.0
        self.watched = False  # ended because the adapter's watch saw it stuck
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
        next_tick = self.t0 + tick_every_s
        period = _FIRST_SAMPLE_S
        killed: FailureReason | None = None
        while killed is None:
            elapsed = time.monotonic() - self.t0
            wait = next_wait(period, elapsed, self.limits, stoppable=stop is not None)
            period = min(period * 2, _SAMPLE_PERIOD_S)
            if self.pipes.serve(self.pidfd, wait) or not child_running(self.proc.pid):
                break
            now_m = time.monotonic()
            seen = Observation(
                elapsed_s=now_m - self.t0,
                rss_bytes=self.tree.sample(),
                stop_requested=stop is not None and stop.is_set(),
            )
            killed = kill_reason(seen, self.limits)
            if killed is None and tick is not None and now_m >= next_tick:
                next_tick = now_m + tick_every_s
                try:
                    tick()
                except Exception as e:  # noqa: BLE001 - re-raised after the tree is gone
                    self.error, killed = e, FailureReason.LEASE_LOST
            if killed is None and stuck is not None and stuck(self.out, self.err):
                self.watched = True
                break
        if killed is not None or self.watched:
            self._terminate()
        self.wall_s = time.monotonic() - self.t0
        return killed

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
