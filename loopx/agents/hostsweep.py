"""What a finished host left behind, found and ended through the subreaper.

The agent is a child subreaper while a host runs (:mod:`loopx.agents.hosttree`
says why), so whatever the host left is among the agent's own children, which
the kernel lists in ``/proc/self/task/*/children``. A child that is not this
host run's (:meth:`~loopx.agents.hosttree.Tree.owns`) is another run's in this
process and is left alone.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterable
from typing import Final

import psutil

from loopx.agents.hosttree import Tree
from loopx.process import kill_tree, running

# How long a sweep of leftovers may take in all (each round SIGKILLs what it finds).
_SWEEP_S: Final = 10.0


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


def leftovers(before: set[int], host_pid: int, tree: Tree) -> list[psutil.Process]:
    """Processes a finished host left behind, found through the subreaper. Reads /proc.

    Every descendant of the host is now below one of our children that was
    not ours before the host started (``before``). One that is not this
    run's (:meth:`Tree.owns`) belongs to a concurrent run in this process
    and is left alone.
    """
    out: list[psutil.Process] = []
    for pid in own_children() - before - {host_pid}:
        try:
            top = psutil.Process(pid)
            family = [top, *top.children(recursive=True)]
        except psutil.Error:
            continue
        out += [p for p in family if tree.owns(p)]
    return out


def reap_children(pids: Iterable[int]) -> None:
    """Collect the exit status of those of ``pids`` that are our exited children."""
    for pid in pids:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)


def sweep(before: set[int], host_pid: int, tree: Tree, *, grace_s: float) -> int:
    """Kill and reap everything the host left (see :func:`leftovers`); return how many.

    Rounds repeat until nothing is left: killing a parent reparents its
    children to us, and a process may fork while it is being killed. Only
    the first round grants the grace.
    """
    killed = 0
    deadline = time.monotonic() + _SWEEP_S + grace_s
    grace = grace_s
    while time.monotonic() < deadline:
        found = leftovers(before, host_pid, tree)
        if not found:
            break
        killed += sum(1 for p in found if running(p))
        kill_tree(found, grace_s=grace)
        reap_children(own_children() - before - {host_pid})
        grace = 0.0
    return killed


__all__ = ["leftovers", "own_children", "reap_children", "sweep"]
