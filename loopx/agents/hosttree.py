"""A host's process tree: find it (even after ``setsid``), measure it, kill it, leave nothing.

The tree is followed by parentage from the host, at the cost of its own
processes (:mod:`loopx.agents.procfs`): each look reads the kernel's last
handed-out pid, and only when it moved reads the new pids, adopting those
whose parent is in the tree. A process keeps its place however it detaches
(``setsid``, a parent that exits), so escaped descendants are measured while
they run, not only found at the end. Without ``/proc`` (not Linux) psutil
walks the host's descendants instead.

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
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

import psutil

from loopx import environ
from loopx.agents import procfs
from loopx.log import get_logger
from loopx.process import find_by_env

log = get_logger(__name__)

# A summed RSS that moved by more than this share since the last look counts as a change.
_RSS_CHANGE: Final = 1 / 8


@dataclass(slots=True)
class _Seen:
    cpu_s: float = 0.0
    orphan: bool = False


@dataclass(frozen=True, slots=True)
class Sample:
    """What one look at the tree saw."""

    rss_bytes: int  # summed RSS of its processes now
    changed: bool  # a process came or went, or the summed RSS moved by more than an eighth


class Tree:
    """Bookkeeping of one host tree: who is in it, what each used, the peak of their memory."""

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
        self._procfs = procfs.available()
        # pid -> start time (ticks; psutil's create_time without /proc) of every process
        # of the tree as of the last look, the host included.
        self._members: dict[int, float] = {}
        # The kernel's last handed-out pid at the last look and the one before
        # (:meth:`_grow`), the pids of the newest span then listed, whether the
        # counter moved then, and whether it is believed at all (None: not read yet).
        self._mark = root_pid
        self._since = root_pid
        self._listed: set[int] = set()
        self._moved = True
        self._trusted: bool | None = None
        self._root_start: int | None = None
        self._last_rss = -1

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

    @property
    def pids(self) -> set[int]:
        """The tree's processes as of the last look, the host included."""
        return set(self._members)

    def descendants(self) -> list[psutil.Process]:
        """The host's descendants (empty once it exited, when found by psutil)."""
        if not self._procfs:
            if self.root is None:
                return []
            try:
                return self.root.children(recursive=True)
            except psutil.Error:
                return []
        out = []
        for pid, start in self._members.items():
            if pid == self.root_pid:
                continue
            # The pid may have been reused since the last look: only the same process is named.
            stat = procfs.read_stat(pid)
            if stat is None or stat.start != start:
                continue
            with contextlib.suppress(psutil.Error):
                out.append(psutil.Process(pid))
        return out

    def marked(self) -> list[psutil.Process]:
        """Processes of this host run: its LOOPX_TURN_KEY and LOOPX_HOST_RUN (even after setsid).

        Not every process with the turn key: after a takeover, the new holder's
        retry of the same turn runs under that key too. Reads every process's
        environment: for the kill, not for sampling.
        """
        marks = {environ.TURN_KEY: self.turn_key}
        if self.run_id is not None:
            marks[environ.HOST_RUN] = self.run_id
        return find_by_env(self.loopx_root, marks)

    def owns(self, proc: psutil.Process) -> bool:
        """Whether a child of ours (or below one) belongs to this host run.

        One without a turn key is ours (a host may scrub its environment, and a
        zombie's cannot be read); one of another root, or of another host run,
        is a concurrent run's in this process, even under the same turn key.
        """
        try:
            env = proc.environ()
        except psutil.Error:
            return True  # a zombie's environment cannot be read: it is ours to reap
        key = env.get(environ.TURN_KEY)
        if key is None:
            return True
        if env.get(environ.ROOT, self.loopx_root) != self.loopx_root:
            return False
        run = env.get(environ.HOST_RUN)
        if self.run_id is not None and run is not None:
            return run == self.run_id
        return key == self.turn_key

    def sample(self, *, scan_marked: bool = False, extra: Iterable[psutil.Process] = ()) -> Sample:
        """Record CPU and RSS of the tree (and ``extra``) now.

        Args:
            scan_marked: also adopt every process carrying this run's marks
                (:meth:`marked`: a scan of every process, for the kill).
            extra: processes to adopt (what the subreaper found after the host).

        Returns:
            The summed RSS, and whether the tree changed since the last look.

        """
        before = set(self._members)
        if self._procfs:
            self._grow()
            for proc in extra:
                self._adopt(proc.pid)
            self.forked = self.forked or len(self._members) > 1
            if scan_marked and self.forked:
                for proc in self.marked():
                    self._adopt(proc.pid)
            total = self._measure_procfs()
        else:
            total = self._measure_psutil(scan_marked=scan_marked, extra=extra)
        self.forked = self.forked or len(self._members) > 1
        changed = (
            set(self._members) != before
            or abs(total - self._last_rss) > self._last_rss * _RSS_CHANGE
        )
        self._last_rss = total
        self.peak_rss = max(self.peak_rss, total)
        return Sample(rss_bytes=total, changed=changed)

    def orphan_cpu(self) -> float:
        """CPU seconds of descendants that no process of the tree waited for."""
        return sum(s.cpu_s for s in self.seen.values() if s.orphan)

    # --- /proc: the tree's own processes, and new pids only when the kernel handed some out ----

    def _grow(self) -> None:
        """Adopt the processes created since the last look whose parent is in the tree.

        The new pids are those the kernel handed out since the look before
        the last one: a pid is counted out a moment before its process shows
        in /proc, so one not listed yet is looked for once more next time.
        """
        if self._root_start is None:
            root = procfs.read_stat(self.root_pid)
            if root is None:
                return  # the host exited and was reaped: nothing of it is left to follow
            self._root_start = root.start
            self._members[self.root_pid] = root.start
        mark = procfs.last_pid()
        if self._trusted is None:
            # Every descendant was created after the host, so its pid came later,
            # unless the counter wrapped; a counter behind the host's pid at the first
            # look is not believed (a sandbox's), and every pid is looked at each time.
            self._trusted = mark is not None and mark >= self.root_pid
        elif self._trusted and mark == self._mark and not self._moved:
            return  # no process was created anywhere since the look before the last
        if self._trusted and mark is not None:
            listed = procfs.pids()
            window = _created_between(listed, self._since, mark)
            fresh = [p for p in window if p not in self._listed and p not in self._members]
            self._listed = set(_created_between(listed, self._mark, mark))
            self._moved = mark != self._mark
            self._since, self._mark = self._mark, mark
        else:
            fresh = [p for p in sorted(procfs.pids()) if p not in self._members]
        # Parents come before their children in the order of creation; a second pass
        # finds a child seen before its parent (a counter that wrapped, an untrusted one).
        while fresh:
            left = [p for p in fresh if not self._adopt(p, not_before=self._root_start)]
            if len(left) == len(fresh):
                break
            fresh = left

    def _adopt(self, pid: int, *, not_before: int | None = None) -> bool:
        """Take ``pid`` into the tree; with ``not_before``, only a descendant started since then.

        A descendant's parent is in the tree, or it is an orphan of this run.
        """
        if pid in self._members:
            return True
        stat = procfs.read_stat(pid)
        if stat is None:
            return False
        if not_before is not None and (
            stat.start < not_before
            or (stat.ppid not in self._members and not self._orphan_of_run(stat))
        ):
            return False
        self._members[pid] = stat.start
        return True

    def _orphan_of_run(self, stat: procfs.Stat) -> bool:
        """Whether a new process whose parent already ended belongs to this run.

        Its parent's death reparented it to us (the subreaper) or to init
        before we saw it. Our own child is judged as the leftovers are; one of
        init's must carry this run's marks, as init adopts every daemon.
        """
        try:
            proc = psutil.Process(stat.pid)
            if stat.ppid == os.getpid():
                return self.owns(proc)
            if stat.ppid not in {0, 1}:
                return False
            env = proc.environ()
        except psutil.Error:
            return False
        if self.run_id is not None:
            return env.get(environ.HOST_RUN) == self.run_id
        return env.get(environ.TURN_KEY) == self.turn_key

    def _measure_procfs(self) -> int:
        total = 0
        me = os.getpid()
        for pid, start in list(self._members.items()):
            stat = procfs.read_stat(pid)
            if stat is None or stat.start != start:
                del self._members[pid]  # collected by its parent (and the pid maybe reused)
                continue
            total += stat.rss_bytes
            if not stat.zombie:
                # Its own high-water mark catches a peak between two looks.
                self.peak_rss = max(self.peak_rss, procfs.high_water(pid) or 0)
            if pid == self.root_pid:
                continue  # the host's CPU is its rusage, read when it is collected
            entry = self.seen.setdefault((pid, start), _Seen())
            entry.cpu_s = max(entry.cpu_s, stat.cpu_s)
            # Reparented to init (or to us, the subreaper) outside the tree: nobody
            # in the tree will wait for it, so the direct child's rusage misses it.
            entry.orphan = entry.orphan or stat.ppid in {0, 1, me}
        return total

    # --- psutil: the host's descendants by parentage, where there is no /proc ---------------------

    def _measure_psutil(self, *, scan_marked: bool, extra: Iterable[psutil.Process]) -> int:
        procs = self.descendants()
        known = {p.pid for p in procs}
        procs += [p for p in extra if p.pid not in known]
        if scan_marked and (procs or self.forked):
            known = {p.pid for p in procs}
            procs += [p for p in self.marked() if p.pid not in known and p.pid != self.root_pid]
        total = 0
        members: dict[int, float] = {}
        if self.root is not None:
            with contextlib.suppress(psutil.Error):
                total += self.root.memory_info().rss
                members[self.root_pid] = self.root.create_time()
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
            members[proc.pid] = key[1]
            entry = self.seen.setdefault(key, _Seen())
            entry.cpu_s = max(entry.cpu_s, times.user + times.system)
            entry.orphan = entry.orphan or ppid in {0, 1} or ppid == os.getpid()
        self._members = members
        return total


def _created_between(pids: list[int], previous: int, last: int) -> list[int]:
    """Those of ``pids`` handed out after ``previous`` up to ``last``, in that order.

    The kernel hands pids out in increasing order and wraps to the lowest
    free one past its maximum.
    """
    if previous <= last:
        return sorted(p for p in pids if previous < p <= last)
    return sorted(p for p in pids if p > previous) + sorted(p for p in pids if p <= last)


__all__ = ["Sample", "Tree"]
