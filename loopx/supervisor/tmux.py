"""Visible mode: one tmux session per root, one window per agent.

The session lives on a tmux server of its own (socket ``<root>/tmux.sock``),
so stopping the fleet can kill that server without touching a person's own
tmux sessions; ``loopx supervisor attach`` attaches to it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

from loopx import exitcodes
from loopx.errors import LoopxError

SOCKET_NAME: Final = "tmux.sock"


class TmuxError(LoopxError):
    """tmux is missing or refused a command."""

    def __init__(self, what: str, detail: str) -> None:
        super().__init__(
            f"tmux could not {what}: {detail}",
            hint="install tmux, or run the supervisor with --visible none (logs go to logs/)",
        )
        self.what = what
        self.detail = detail


class TmuxMissingError(TmuxError):
    """``--visible tmux`` without the tmux program: a setup the command line asked for (exit 2)."""

    exit_code = exitcodes.USAGE  # like a missing host program or workdir (docs/cli.md)


def session_name(root: Path) -> str:
    """A stable session name for a root: ``loopx-`` plus a short hash of its path."""
    return "loopx-" + hashlib.sha256(str(root).encode()).hexdigest()[:8]


def socket_path(root: Path) -> Path:
    """The root's private tmux server socket."""
    return root / SOCKET_NAME


# The size of the terminal that started the fleet, not of a pane: a window's program
# that read them (the fleet window's status table) would wrap at the wrong width.
_TERMINAL_SIZE: Final = ("COLUMNS", "LINES")


def _pane_environment() -> dict[str, str]:
    """The environment the server (and so every window) starts from."""
    return {k: v for k, v in os.environ.items() if k not in _TERMINAL_SIZE}


class TmuxSession:
    """One tmux session on the root's private server."""

    def __init__(self, root: Path) -> None:
        self.socket = socket_path(root)
        self.name = session_name(root)
        program = shutil.which("tmux")
        if program is None:
            raise TmuxMissingError("start", "the tmux program is not on PATH")
        self.program = program

    def _run(self, *args: str, what: str) -> str:
        proc = subprocess.run(
            [self.program, "-S", str(self.socket), *args],
            capture_output=True,
            text=True,
            check=False,
            stdin=subprocess.DEVNULL,
            env=_pane_environment(),
        )
        if proc.returncode != 0:
            raise TmuxError(what, proc.stderr.strip() or f"exit code {proc.returncode}")
        return proc.stdout.strip()

    def exists(self) -> bool:
        """Whether the session is up."""
        try:
            self._run("has-session", "-t", self.name, what="find the session")
        except TmuxError:
            return False
        return True

    def create(self, fleet_argv: Sequence[str] | None = None) -> None:
        """Start the server and the session; its first window, ``fleet``, runs ``fleet_argv``.

        ``fleet_argv`` is a live status table (``loopx status --watch``); without
        it the window is a shell.
        """
        if self.exists():
            return
        command = [shlex.join(fleet_argv)] if fleet_argv else []
        self._run(
            "new-session",
            "-d",
            "-s",
            self.name,
            "-n",
            "fleet",
            "-x",
            "200",
            "-y",
            "50",
            *command,
            what="create the session",
        )
        # Keep a dead agent's window (its last output and "Pane is dead (status N)") until
        # the restart. A window option: set server-wide (-g -w), the server is this root's own.
        self._run("set-option", "-g", "-w", "remain-on-exit", "on", what="set remain-on-exit")

    def window_name(self, agent_id: str) -> str:
        """The window of an agent."""
        return agent_id

    def start_window(
        self,
        agent_id: str,
        argv: Sequence[str],
        env: Mapping[str, str],
        *,
        log_path: Path | None = None,
    ) -> int:
        """Run ``argv`` in a fresh window named after the agent; returns the agent's pid.

        ``exec`` makes the pane's process the agent itself, so its pid is the
        agent's pid and signals reach it directly. With ``log_path`` what the
        window shows is also appended to that file, so a crash's last words
        outlive the window.
        """
        self.kill_window(agent_id)
        assignments = [f"{k}={v}" for k, v in env.items()]
        command = "exec env " + shlex.join([*assignments, *argv])
        out = self._run(
            "new-window",
            "-d",
            "-P",
            "-F",
            "#{pane_pid}",
            "-t",
            f"{self.name}:",
            "-n",
            self.window_name(agent_id),
            command,
            what=f"open a window for {agent_id}",
        )
        if log_path is not None:
            target = f"{self.name}:{self.window_name(agent_id)}"
            # JSON lines without the terminal's codes, rotated (loopx.supervisor.windowlog).
            helper = [sys.executable, "-P", "-m", "loopx.supervisor.windowlog"]
            pipe = shlex.join([*helper, str(log_path), agent_id])
            self._run("pipe-pane", "-t", target, pipe, what=f"log the window of {agent_id}")
        return int(out.splitlines()[-1])

    def dead_status(self, agent_id: str) -> int | None:
        """How a window's process ended, as a Popen returncode (``-N`` for signal N).

        Returns:
            None while the process runs, or when the window is gone.
        """
        try:
            out = self._run(
                "list-panes",
                "-t",
                f"{self.name}:{self.window_name(agent_id)}",
                "-F",
                "#{pane_dead} #{pane_dead_status} #{pane_dead_signal}",
                what="read the exit status",
            )
        except TmuxError:
            return None
        dead, _, rest = out.splitlines()[0].partition(" ") if out else ("0", "", "")
        if dead != "1":
            return None
        status, _, signum = rest.partition(" ")
        if signum.strip():
            return -int(signum)
        return int(status) if status.strip() else None

    def collect_exits(self) -> None:
        """Make the tmux server collect its exited panes' statuses now.

        tmux 3.3 can miss the SIGCHLD of a pane whose terminal closed first: the
        pane shows dead, its process stays a zombie and no status ever appears.
        A SIGCHLD we send makes the server run its ``waitpid`` loop again.
        """
        try:
            pid = int(self._run("display-message", "-p", "#{pid}", what="find the server"))
        except (TmuxError, ValueError):
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGCHLD)

    def kill_window(self, agent_id: str) -> None:
        """Close an agent's window if it exists."""
        try:
            self._run(
                "kill-window", "-t", f"{self.name}:{self.window_name(agent_id)}", what="close"
            )
        except TmuxError:
            return

    def kill_server(self) -> None:
        """Stop the root's tmux server (and every window in it)."""
        if not self.socket.exists():
            return
        subprocess.run(
            [self.program, "-S", str(self.socket), "kill-server"],
            capture_output=True,
            check=False,
            stdin=subprocess.DEVNULL,
        )
        self.socket.unlink(missing_ok=True)

    def attach_argv(self) -> list[str]:
        """The command a person runs to watch the fleet."""
        return [self.program, "-S", str(self.socket), "attach-session", "-t", self.name]
