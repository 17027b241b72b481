"""Run one host process tree: spawn, feed, capture (bounded), measure, enforce, reap.

The host runs from its argv (never a shell) in its own session and process
group, with cwd = the goal's workdir and the envelope on stdin. One loop in
the calling thread waits on the host's pidfd and its pipes together
(``select``): it feeds stdin, reads stdout and stderr as they fill (keeping
the first 1 MiB of each and counting the rest, so a chatty host can neither
fill memory nor block on a full pipe) and wakes the moment the host exits, so
a short host costs no polling latency and no thread start-ups. The tree is
sampled with psutil: descendants by parentage, plus (at enforcement, and at
the end when the tree was seen to fork or another process still holds the
host's pipes after it exited) every process carrying this turn's
``LOOPX_TURN_KEY`` in its environment, which finds grandchildren that
``setsid`` away from the group. That scan reads every process's environment,
so a plain host that forked nothing never pays for it.

Usage: CPU is the direct child's ``wait4`` rusage (which includes every
descendant it waited for) plus the last sample of descendants that were
orphaned (and so never waited for inside the tree); peak RSS is the largest
summed RSS of a sample, or the rusage maxrss if larger.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import IO, Final

import psutil
import structlog

from loopx import environ
from loopx.model import utcnow
from loopx.process import child_running, find_by_env, kill_tree, running
from loopx.quota.usage import Usage
from loopx.turn.failures import FailureReason
from loopx.turn.journal import OUTPUT_LIMIT_BYTES

log = structlog.get_logger(__name__)

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
    """One output stream: the first ``limit`` bytes kept, the rest counted."""

    limit: int = OUTPUT_LIMIT_BYTES
    kept: bytearray = field(default_factory=bytearray)
    dropped: int = 0
    tee: Callable[[bytes], None] | None = None  # also sees every chunk (the live tail)

    def feed(self, chunk: bytes) -> None:
        """Keep what fits under the limit, count the rest."""
        if self.tee is not None:
            self.tee(chunk)
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


@dataclass(slots=True)
class _Seen:
    cpu_s: float = 0.0
    orphan: bool = False


class _Tree:
    """psutil bookkeeping of one host tree."""

    def __init__(self, root_pid: int, turn_key: str, loopx_root: str) -> None:
        self.root_pid = root_pid
        self.turn_key = turn_key
        self.loopx_root = loopx_root
        self.seen: dict[tuple[int, float], _Seen] = {}
        self.peak_rss = 0
        self.forked = False
        self._root: psutil.Process | None = None
        self._root_read = False

    @property
    def root(self) -> psutil.Process | None:
        """The host process, looked up on first use: a host that exits before
        the first sample never costs a /proc read. Its pid cannot be reused
        meanwhile, as it is our unreaped child.
        """
        if not self._root_read:
            self._root_read = True
            with contextlib.suppress(psutil.Error):
                self._root = psutil.Process(self.root_pid)
        return self._root

    def descendants(self) -> list[psutil.Process]:
        if self.root is None:
            return []
        try:
            return self.root.children(recursive=True)
        except psutil.Error:
            return []

    def marked(self) -> list[psutil.Process]:
        """Processes carrying this turn's LOOPX_TURN_KEY (found even after setsid)."""
        return find_by_env(self.loopx_root, {environ.TURN_KEY: self.turn_key})

    def sample(self, *, scan_marked: bool = False) -> int:
        """Record CPU and RSS of the tree now; return the summed RSS in bytes."""
        procs = self.descendants()
        if procs:
            self.forked = True
        if scan_marked and self.forked:
            known = {p.pid for p in procs}
            procs += [p for p in self.marked() if p.pid not in known and p.pid != self.root_pid]
        total = 0
        if self.root is not None:
            with contextlib.suppress(psutil.Error):
                total += self.root.memory_info().rss
        for proc in procs:
            try:
                with proc.oneshot():
                    times = proc.cpu_times()
                    rss = proc.memory_info().rss
                    ppid = proc.ppid()
                    key = (proc.pid, proc.create_time())
            except psutil.Error:
                continue
            total += rss
            entry = self.seen.setdefault(key, _Seen())
            entry.cpu_s = max(entry.cpu_s, times.user + times.system)
            # Reparented to init (or a subreaper) outside the tree: nobody in the
            # tree will wait for it, so the direct child's rusage misses it.
            entry.orphan = entry.orphan or ppid in {0, 1} or ppid == os.getpid()
        self.peak_rss = max(self.peak_rss, total)
        return total

    def orphan_cpu(self) -> float:
        return sum(s.cpu_s for s in self.seen.values() if s.orphan)


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

    Returns:
        The run; a program that cannot start gives ``spawn_error``.

    """
    started = utcnow()
    t0 = time.monotonic()
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=cwd,
            env=dict(env),
            start_new_session=True,
            close_fds=True,
        )
    except OSError as e:
        now = utcnow()
        return HostRun(
            pid=0,
            exit_code=None,
            signal=None,
            stdout=Capture(),
            stderr=Capture(),
            usage=Usage(),
            killed=None,
            started_at=started,
            ended_at=now,
            spawn_error=f"cannot start {argv[0]!r} in {cwd}: {e.strerror or e}",
        )
    out, err = Capture(tee=tee), Capture(tee=tee)
    pipes = _Pipes(proc, stdin, out, err)
    try:
        pidfd: int | None = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):  # pragma: no cover - old kernels
        pidfd = None
    tree = _Tree(proc.pid, turn_key, loopx_root)
    killed: FailureReason | None = None
    error: BaseException | None = None
    next_tick = t0 + tick_every_s
    period = _FIRST_SAMPLE_S
    try:
        while True:
            wake = min(period, max(limits.timeout_s - (time.monotonic() - t0), 0.0) + 0.001)
            if stop is not None:
                wake = min(wake, 0.05)
            exited = pipes.serve(pidfd, wake)
            period = min(period * 2, _SAMPLE_PERIOD_S)
            if exited or not child_running(proc.pid):
                break
            now_m = time.monotonic()
            reason = None
            rss = tree.sample()
            if stop is not None and stop.is_set():
                reason = FailureReason.STOPPED
            elif now_m - t0 > limits.timeout_s:
                reason = FailureReason.TURN_TIMEOUT
            elif limits.max_rss_mb is not None and rss > limits.max_rss_mb * _MB:
                reason = FailureReason.QUOTA_MEMORY_EXCEEDED
            if reason is None and tick is not None and now_m >= next_tick:
                next_tick = now_m + tick_every_s
                try:
                    tick()
                except Exception as e:  # noqa: BLE001 - re-raised after the tree is gone
                    error, reason = e, FailureReason.LEASE_LOST
            if reason is not None:
                killed = reason
                _terminate_tree(tree, proc, limits.kill_grace_s)
                break
        ended = utcnow()
        wall = time.monotonic() - t0
        if killed is None and (tree.forked or pipes.held_elsewhere()):
            # The host exited; its descendants must not outlive the turn.
            leftovers = [p for p in [*tree.descendants(), *tree.marked()] if p.pid != proc.pid]
            if leftovers:
                tree.sample(scan_marked=True)
                kill_tree(leftovers, pgid=proc.pid, grace_s=limits.kill_grace_s)
                log.info("host_leftovers_killed", pid=proc.pid, processes=len(leftovers))
        # Whatever is still in the host's group goes now; the group id is safe
        # to use while the (zombie) leader is not yet reaped.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        _, status, rusage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    finally:
        if pidfd is not None:
            os.close(pidfd)
        if proc.returncode is None and child_running(proc.pid):  # an exception above
            _terminate_tree(tree, proc, limits.kill_grace_s)
            with contextlib.suppress(ChildProcessError):
                os.wait4(proc.pid, 0)
        # What the tree wrote before it ended; bounded like the old reader threads' join.
        with contextlib.suppress(OSError, ValueError):
            pipes.drain(time.monotonic() + _DRAIN_S)
        pipes.close()
    if error is not None:
        raise error
    cpu = rusage.ru_utime + rusage.ru_stime + tree.orphan_cpu()
    peak = max(tree.peak_rss, rusage.ru_maxrss * 1024)
    exit_code = proc.returncode
    return HostRun(
        pid=proc.pid,
        exit_code=exit_code if exit_code >= 0 else None,
        signal=-exit_code if exit_code < 0 else None,
        stdout=out,
        stderr=err,
        usage=Usage(cpu_s=cpu, wall_s=wall, peak_rss_mb=peak / _MB),
        killed=killed,
        started_at=started,
        ended_at=ended,
    )


def _terminate_tree(tree: _Tree, proc: subprocess.Popen[bytes], grace_s: float) -> None:
    """Kill the whole tree: the group, every descendant, every marked process."""
    tree.sample(scan_marked=True)
    found = {p.pid: p for p in [*tree.descendants(), *tree.marked()] if p.pid != proc.pid}
    kill_tree(found.values(), pgid=proc.pid, grace_s=grace_s, child_pid=proc.pid)
    # Something forked while we were killing: one more sweep, straight to SIGKILL.
    late = [p for p in tree.marked() if p.pid != proc.pid and running(p)]
    if late:
        kill_tree(late, grace_s=0.0)
    log.info("host_tree_killed", pid=proc.pid, processes=len(found) + 1)
