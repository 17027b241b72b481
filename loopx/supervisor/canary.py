"""The supervisor's canary duty: probe the host CLIs at start, and again when a binary changes.

At start the duty runs the probe (``python -m loopx.agents.canary``, a process
of its own: the supervisor never imports the agents) on every host kind whose
CLI is on PATH. Every ``interval_s`` it ``stat``s those binaries and probes
again the kinds whose size or mtime moved from the fingerprint last recorded
(an upgrade; the probe reads the version itself). One probe process runs at a
time; its verdicts land in ``hosts.json``, where the agents' turns and the
notifications read them. A probe that fails never stops the supervisor.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from typing import Final

import psutil

from loopx import environ, process
from loopx.errors import LoopxError
from loopx.hostcanary import read_hosts, stale_kinds
from loopx.log import get_logger
from loopx.registry.hostprogram import cli_programs
from loopx.root import Layout
from loopx.supervisor.process import spawn

log = get_logger(__name__)

STAT_INTERVAL_S: Final = 10.0
STOP_GRACE_S: Final = 2.0


def binary_stats(
    programs: Mapping[str, str], path: str | None
) -> dict[str, tuple[int, int] | None]:
    """Each kind's program on ``path`` as ``(size, mtime_ns)`` (following links); None: absent."""
    stats: dict[str, tuple[int, int] | None] = {}
    for kind, program in programs.items():
        found = shutil.which(program, path=path)
        try:
            st = os.stat(found) if found is not None else None
        except OSError:
            st = None
        stats[kind] = None if st is None else (st.st_size, st.st_mtime_ns)
    return stats


class CanaryDuty:
    """The probe process running, if any, and when the binaries are looked at next."""

    def __init__(
        self,
        layout: Layout,
        env: Mapping[str, str],
        *,
        python: str = sys.executable,
        interval_s: float = STAT_INTERVAL_S,
    ) -> None:
        self.layout = layout
        self.env = dict(env)
        self.python = python
        self.interval_s = interval_s
        self.next_at = 0.0  # monotonic
        self.probe: subprocess.Popen[bytes] | None = None
        self._programs: dict[str, str] | None = None  # the kinds watched, found at the first step

    def due(self, now: float) -> bool:
        """Whether a step is due at monotonic time ``now``."""
        return now >= self.next_at

    def step(self, now: float) -> list[str]:
        """Start a probe of the kinds whose binary is new or changed; the kinds it probes."""
        self.next_at = now + self.interval_s
        if self.probe is not None:
            code = self.probe.poll()
            if code is None:
                return []  # one probe at a time; the next step looks again
            if code != 0:
                log.warning("canary_failed", exit_code=code, log="logs/canary.log")
            self.probe = None
        first = self._programs is None
        if self._programs is None:
            self._programs = cli_programs()
        stats = binary_stats(self._programs, self.env.get("PATH"))
        present = {kind: st for kind, st in stats.items() if st is not None}
        try:
            kinds = sorted(present) if first else stale_kinds(read_hosts(self.layout), present)
        except LoopxError as e:
            log.warning("canary_hosts_unreadable", error=e.message)
            return []
        if kinds:
            self._start(kinds)
        return kinds

    def _start(self, kinds: list[str]) -> None:
        argv = [self.python, "-m", "loopx.agents.canary", "--root", str(self.layout.root)]
        env = {**self.env, environ.ROOT: str(self.layout.root)}
        self.probe = spawn([*argv, *kinds], env=env, log_path=self.layout.logs_dir / "canary.log")
        log.info("canary_started", kinds=kinds, pid=self.probe.pid)

    def stop(self) -> None:
        """Stop a probe still running (the supervisor stops): nothing of it is left behind."""
        if self.probe is not None and self.probe.poll() is None:
            pid = self.probe.pid
            try:
                members = process.tree(psutil.Process(pid))
            except psutil.NoSuchProcess:
                members = []
            process.kill_tree(members, grace_s=STOP_GRACE_S, pgid=pid, child_pid=pid)
            self.probe.wait()
        self.probe = None


__all__ = ["STAT_INTERVAL_S", "CanaryDuty", "binary_stats"]
