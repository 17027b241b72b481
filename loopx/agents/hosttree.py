"""A host's process tree: find it (even after ``setsid``), measure it, kill it, leave nothing.

The agent becomes a *child subreaper* (``PR_SET_CHILD_SUBREAPER``) while a
host runs, so a descendant that detaches (fork, ``setsid``, fork, exit) is
reparented to the agent instead of init. After the host exits, whatever it
left is therefore among the agent's own children, which the kernel lists in
``/proc/self/task/*/children`` at the cost of a few small reads: no scan of
every process is needed to find a daemon that detached within microseconds
(half of such daemons used to survive their turn).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

import psutil

from loopx import environ
from loopx.log import get_logger
from loopx.process import find_by_env, kill_tree, running

log = get_logger(__name__)

# How long a sweep of leftovers may take in all (each round SIGKILLs what it finds).
_SWEEP_S: Final = 10.0


@dataclass(slots=True)
class _Seen:
    cpu_s: float = 0.0
    orphan: bool = False


class Tree:
    """psutil bookkeeping of one host tree."""

    def __init__(
        self, root_pid: int, turn_key: str, loopx_root: str, run_id: str | None = None
    ) -> None:
        self.root_pid = root_pid
        self.turn_key = turn_key
        self.loopx_root = loopx_root
        self.run_id = run_id
        self.seen: dict[tuple[int, float], _Seen] = {}
        self.peak_rss = 0
        self.forked = False
        self._root: psutil.Process | None = None
        self._root_read = False

    @property
    def root(self) -> psutil.Process | None:
        """The host process, looked up on first use.

        A host that exits before the first sample never costs a /proc read.
        Its pid cannot be reused meanwhile, as it is our unreaped child.
        """
        if not self._root_read:
            self._root_read = True
            with contextlib.suppress(psutil.Error):
                self._root = psutil.Process(self.root_pid)
        return self._root

    def descendants(self) -> list[psutil.Process]:
        """The host's descendants by parentage (empty once it exited)."""
        if self.root is None:
            return []
        try:
            return self.root.children(recursive=True)
        except psutil.Error:
            return []

    def marked(self) -> list[psutil.Process]:
        """Processes of this host run: its LOOPX_TURN_KEY and LOOPX_HOST_RUN (even after setsid).

        Not every process with the turn key: after a takeover, the new holder's
        retry of the same turn runs under that key too.
        """
        marks = {environ.TURN_KEY: self.turn_key}
        if self.run_id is not None:
            marks[environ.HOST_RUN] = self.run_id
        return find_by_env(self.loopx_root, marks)

    def sample(self, *, scan_marked: bool = False, extra: Iterable[psutil.Process] = ()) -> int:
        """Record CPU and RSS of the tree (and ``extra``) now; return the summed RSS in bytes."""
        procs = self.descendants()
        if procs:
            self.forked = True
        known = {p.pid for p in procs}
        procs += [p for p in extra if p.pid not in known]
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
            # Reparented to init (or to us, the subreaper) outside the tree: nobody
            # in the tree will wait for it, so the direct child's rusage misses it.
            entry.orphan = entry.orphan or ppid in {0, 1} or ppid == os.getpid()
        self.peak_rss = max(self.peak_rss, total)
        return total

    def orphan_cpu(self) -> float:
        """CPU seconds of descendants that no process of the tree waited for."""
        return sum(s.cpu_s for s in self.seen.values() if s.orphan)


# --- orphans come back to us (the agent is a subreaper: loopx.process.subreaper) ----------


def own_children() -> set[int]:
    """Pids of this process's direct children (every thread's), from /proc; empty if unknown."""
    out: set[int] = set()
    try:
        tids = os.listdir("/proc/self/task")
        for tid in tids:
            with open(f"/proc/self/task/{tid}/children", "rb") as f:
                out.update(int(pid) for pid in f.read().split())
    except (OSError, ValueError):
        # No per-task children list (a kernel without CONFIG_PROC_CHILDREN, a
        # thread that just ended): ask psutil, which scans every process.
        with contextlib.suppress(psutil.Error):
            return {p.pid for p in psutil.Process().children()}
    return out


def leftovers(before: set[int], host_pid: int, turn_key: str) -> list[psutil.Process]:
    """Processes a finished host left behind, found through the subreaper. Reads /proc.

    Every descendant of the host is now below one of our children that was
    not ours before the host started (``before``). A process carrying
    another turn's key belongs to a concurrent run in this process and is
    left alone; one without a key (a host may scrub its environment) is ours.
    """
    out: list[psutil.Process] = []
    for pid in own_children() - before - {host_pid}:
        try:
            top = psutil.Process(pid)
            tree = [top, *top.children(recursive=True)]
        except psutil.Error:
            continue
        out += [p for p in tree if _turn_key_of(p) in {turn_key, None}]
    return out


def _turn_key_of(proc: psutil.Process) -> str | None:
    try:
        return proc.environ().get(environ.TURN_KEY)
    except psutil.Error:
        return None  # a zombie's environment cannot be read: it is ours to reap


def reap_children(pids: Iterable[int]) -> None:
    """Collect the exit status of those of ``pids`` that are our exited children."""
    for pid in pids:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)


def sweep(before: set[int], host_pid: int, turn_key: str, *, grace_s: float) -> int:
    """Kill and reap everything the host left (see :func:`leftovers`); return how many.

    Rounds repeat until nothing is left: killing a parent reparents its
    children to us, and a process may fork while it is being killed. Only
    the first round grants the grace.
    """
    killed = 0
    deadline = time.monotonic() + _SWEEP_S + grace_s
    grace = grace_s
    while time.monotonic() < deadline:
        found = leftovers(before, host_pid, turn_key)
        if not found:
            break
        killed += sum(1 for p in found if running(p))
        kill_tree(found, grace_s=grace)
        reap_children(own_children() - before - {host_pid})
        grace = 0.0
    return killed


__all__ = [
    "Tree",
    "leftovers",
    "own_children",
    "reap_children",
    "sweep",
]
