"""Where agents run: the back-end interface the supervisor drives, and the local back-end.

The supervisor (:mod:`loopx.supervisor.supervisor`) owns the policy: how many
agents, when to restart one (backoff, crash loop), when one stalled, how a
stop proceeds. A back-end owns the mechanism of one place agents can live:

* :class:`LocalRunner` starts each agent as a local process
  (``python -m loopx.agents run``), headless or in a tmux window;
* :class:`loopx.supervisor.ray_backend.RayRunner` starts each agent as a Ray
  actor running the same :class:`loopx.agents.loop.Agent`.

Both hand back :class:`AgentHandle` objects the supervisor polls, asks to
stop, and kills.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Protocol

import psutil

from loopx import environ, process
from loopx.fleet import Backend, ExitStatus, RayPlacement, Visibility
from loopx.root import Layout
from loopx.supervisor.notify import child_env
from loopx.supervisor.process import fleet_processes, spawn
from loopx.supervisor.tmux import TmuxSession

_DEAD_PANE_WAIT_S: Final = 10.0  # how long tmux may take to report a gone agent's status
_NUDGE_EVERY_S: Final = 0.5  # then ask tmux again to collect it (it can miss a SIGCHLD)


@dataclass(frozen=True, slots=True)
class AgentSpec:
    """What every agent of a fleet is started with (the agent-facing supervisor options)."""

    heartbeat_s: float = 2.0
    idle_max_s: float = 2.0
    max_turns: int | None = None
    log_level: str = "info"
    python: str = sys.executable


class AgentHandle(Protocol):
    """One started agent, wherever it lives."""

    agent_id: str

    @property
    def ref(self) -> process.ProcessIdentity | None:
        """The agent's process (pid and start time) once known; None before."""

    @property
    def placement(self) -> RayPlacement | None:
        """The Ray node and actor it runs as, once known; None for a local agent."""

    def exit_status(self) -> ExitStatus | None:
        """How the agent ended, or None while it runs."""

    def request_stop(self) -> None:
        """Ask the agent to stop at a safe point (the first SIGTERM of a local agent)."""

    def kill(self, *, grace_s: float) -> None:
        """End the agent and its hosts now: terminate, then kill after ``grace_s``."""


class AgentRunner(Protocol):
    """A back-end: starts agents and cleans up after them."""

    name: Backend

    def open(self) -> None:
        """Prepare the back-end (connect to a cluster, create the tmux session)."""

    def spawn(self, index: int, agent_id: str) -> AgentHandle:
        """Start agent ``agent_id`` in slot ``index``."""

    def close(self, *, grace_s: float) -> None:
        """Release the back-end; every agent it started is gone afterwards."""

    @property
    def tmux_name(self) -> str | None:
        """The tmux session a person can attach to, if any."""


# --- local processes -----------------------------------------------------------------------------


@dataclass(slots=True)
class LocalAgent:
    """An agent process on this machine (a child, or a tmux window's process)."""

    agent_id: str
    root: Path
    me_pid: int
    proc: subprocess.Popen[bytes] | None
    _ref: process.ProcessIdentity | None
    tmux: TmuxSession | None = None  # the agent runs in this session's window
    _gone_at: float | None = None  # when its process was first seen gone (tmux pane not dead yet)
    _nudged_at: float | None = None  # when tmux was last asked to collect exit statuses

    @property
    def ref(self) -> process.ProcessIdentity | None:
        """The agent's process."""
        return self._ref

    @property
    def placement(self) -> RayPlacement | None:
        """None: a local agent is a process on this machine, not a Ray actor."""
        return None

    def exit_status(self) -> ExitStatus | None:
        """How the process ended, or None while it runs."""
        if self.proc is not None:
            rc = self.proc.poll()
            return None if rc is None else ExitStatus.of_returncode(rc)
        if self._ref is None or not self._ref.alive():
            # Not our child: tmux reaped it and keeps its status in the dead pane.
            rc = self.tmux.dead_status(self.agent_id) if self.tmux is not None else None
            if rc is None and self.tmux is not None:
                # tmux records the status a moment after the process is gone: wait for it,
                # and wake tmux up in case it missed the SIGCHLD.
                now = time.monotonic()
                gone_at = self._gone_at = self._gone_at or now
                if now - gone_at < _DEAD_PANE_WAIT_S:
                    if now - (self._nudged_at or gone_at) >= _NUDGE_EVERY_S:
                        self._nudged_at = now
                        self.tmux.collect_exits()
                    return None
            return ExitStatus.of_returncode(rc)
        return None

    def request_stop(self) -> None:
        """SIGTERM the agent: it stops its turn at a safe point and exits 0."""
        if self._ref is not None and (found := self._ref.find()) is not None:
            process.signal_all([found], signal.SIGTERM)

    def kill(self, *, grace_s: float) -> None:
        """Kill the agent, its descendants and every process carrying its agent id."""
        procs: dict[int, psutil.Process] = {}
        if self._ref is not None and (found := self._ref.find()) is not None:
            procs.update({p.pid: p for p in process.tree(found)})
        procs.update({p.pid: p for p in fleet_processes(self.root, agent_id=self.agent_id)})
        procs.pop(self.me_pid, None)
        process.kill_tree(list(procs.values()), grace_s=grace_s)
        self.wait(1.0)

    def wait(self, timeout_s: float) -> None:
        """Collect the child's exit status (so it is no zombie)."""
        if self.proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=timeout_s)


@dataclass(slots=True)
class LocalRunner:
    """The default back-end: each agent a local process, headless or in a tmux window."""

    layout: Layout
    spec: AgentSpec
    env: Mapping[str, str]
    visible: Visibility = Visibility.NONE
    name: Backend = Backend.LOCAL
    me: process.ProcessIdentity = field(default_factory=process.ProcessIdentity.current)
    _tmux: TmuxSession | None = None

    @property
    def tmux_name(self) -> str | None:
        """The tmux session name with ``--visible tmux``."""
        return self._tmux.name if self._tmux is not None else None

    def open(self) -> None:
        """Create the tmux session with ``--visible tmux``."""
        if self.visible is Visibility.TMUX:
            self._tmux = TmuxSession(self.layout.root)
            self._tmux.create(self.fleet_argv())

    def fleet_argv(self) -> list[str]:
        """The ``fleet`` window's command: the live status table of this root."""
        return [
            # -P as for the agents: a `loopx/` folder in the cwd once killed this window
            self.spec.python, "-P", "-m", "loopx", "status", "--watch",
            "--root", str(self.layout.root), "--registry", str(self.layout.registry),
        ]  # fmt: skip

    def argv(self, agent_id: str) -> list[str]:
        """The agent's command line."""
        argv = [
            # -P: never import from the cwd (a `loopx/` folder there would shadow ours)
            self.spec.python, "-P", "-m", "loopx.agents", "run",
            "--root", str(self.layout.root), "--registry", str(self.layout.registry),
            "--agent-id", agent_id,
            "--heartbeat-seconds", str(self.spec.heartbeat_s),
            "--idle-max-seconds", str(self.spec.idle_max_s),
            "--parent-pid", str(self.me.pid), "--parent-started-at", repr(self.me.started_at),
            "--log-level", self.spec.log_level,
        ]  # fmt: skip
        if self.spec.max_turns is not None:
            argv += ["--max-turns", str(self.spec.max_turns)]
        return argv

    def spawn(self, index: int, agent_id: str) -> LocalAgent:
        """Start the agent process (its own session; output to ``logs/agent-<index>.log``)."""
        argv = self.argv(agent_id)
        extra = {environ.ROOT: str(self.layout.root), environ.AGENT_ID: agent_id}
        proc: subprocess.Popen[bytes] | None = None
        log_path = self.layout.logs_dir / f"agent-{index}.log"
        if self._tmux is not None:
            pid = self._tmux.start_window(agent_id, argv, extra, log_path=log_path)
            started = process.started_at(pid)
            ref = process.ProcessIdentity(pid, started) if started is not None else None
        else:
            env = child_env(self.env) | extra
            proc = spawn(argv, env=env, log_path=log_path)
            started = process.started_at(proc.pid)
            ref = process.ProcessIdentity(proc.pid, started or time.time())
        return LocalAgent(agent_id, self.layout.root, self.me.pid, proc, ref, self._tmux)

    def close(self, *, grace_s: float) -> None:  # noqa: ARG002 - the supervisor killed the agents
        """Remove the tmux session."""
        if self._tmux is not None:
            self._tmux.kill_server()
