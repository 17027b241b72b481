"""Run one host process tree: spawn, feed, capture (bounded), measure, enforce, reap.

The host runs from its argv (never a shell) in its own session and process
group, with cwd = the goal's workdir and the envelope on stdin. One loop in
the calling thread waits on the host's pidfd and its pipes together
(``select``): it feeds stdin, reads stdout and stderr as they fill (keeping
the first 1 MiB of each and counting the rest, so a chatty host can neither
fill memory nor block on a full pipe) and wakes the moment the host exits, so
a short host costs no polling latency and no thread start-ups
(:class:`~loopx.agents.hostwatch.RunningHost`). Whether to kill the running
host is one pure decision (:func:`~loopx.agents.hostlimits.kill_reason`) over
what the loop knows at each wake-up; :func:`run_host` is the shell around it.

Watching is nearly free: the tree is sampled at intervals that start at
10 ms and back off to 1 s while it is quiet (:mod:`loopx.agents.hostlimits`),
each sample reading only the tree's own processes (:mod:`loopx.agents.hosttree`),
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
import resource
import secrets
import subprocess
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from loopx import environ
from loopx.agents.hostguard import HostGuard, guard_for_run
from loopx.agents.hostlimits import MB, Limits
from loopx.agents.hostpipes import Capture
from loopx.agents.hostsweep import own_children
from loopx.agents.hosttree import Tree
from loopx.agents.hostwatch import RunningHost
from loopx.model import utcnow
from loopx.process import subreaper
from loopx.turn.failures import FailureReason
from loopx.usage import Usage


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
            proc = _spawn(argv, cwd, {**env, environ.HOST_RUN: run_id})
        except OSError as e:
            return _not_started(argv, cwd, e, started)
        guard.watch(proc.pid)
        tree = Tree(proc.pid, turn_key, loopx_root, run_id)
        run = RunningHost(proc, stdin, tree, limits, before, tee=tee, echo=echo)
        killed, ended, rusage = run.to_end(stop, tick, tick_every_s, stuck=watch)
    if run.error is not None:
        raise run.error
    return _report(run, killed, rusage, started=started, ended=ended)


def _spawn(argv: list[str], cwd: Path, env: Mapping[str, str]) -> subprocess.Popen[bytes]:
    """Start the host in its own session, its three pipes ours.

    Raises:
        OSError: the program cannot be started.

    """
    return subprocess.Popen(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=cwd,
        env=env,
        start_new_session=True,
        close_fds=True,
    )


def _report(
    run: RunningHost,
    killed: FailureReason | None,
    rusage: resource.struct_rusage,
    *,
    started: datetime,
    ended: datetime,
) -> HostRun:
    """What a reaped host run left, measured."""
    cpu = rusage.ru_utime + rusage.ru_stime + run.tree.orphan_cpu()
    # The tree's samples only: the host's own ru_maxrss counts the forked agent's
    # pages before exec (45 MB for a sleeping `sh`), so the peak and the cap
    # (kill_reason) read one measurement; the peak also holds each process's own
    # high-water mark, which a spike between two samples leaves behind.
    peak = run.tree.peak_rss
    code = run.proc.returncode
    return HostRun(
        pid=run.proc.pid,
        exit_code=code if code >= 0 else None,
        signal=-code if code < 0 else None,
        stdout=run.out,
        stderr=run.err,
        usage=Usage(cpu_s=cpu, wall_s=run.wall_s, peak_rss_mb=peak / MB),
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
