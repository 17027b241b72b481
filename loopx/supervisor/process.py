"""The supervisor's own processes: spawn an agent, find the fleet's processes, reap, describe.

Identity, liveness and killing live in the kernel (:mod:`loopx.process`);
the policy (when to kill, how long to wait) in :mod:`loopx.supervisor.supervisor`.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO

import psutil

from loopx import environ
from loopx.log.rotation import open_log
from loopx.process import find_by_env, signals_blocked
from loopx.supervisor.child import log_env


def spawn(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    log_path: Path | None,
    cwd: Path | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``argv`` as the leader of a new session, stdout and stderr to ``log_path``.

    The handled signals stay blocked during the fork so the supervisor's
    handlers never run in a half-made child.
    """
    out: IO[bytes] | int = subprocess.DEVNULL
    if log_path is not None:
        out = os.fdopen(open_log(log_path), "ab", buffering=0)
        env = log_env(env, log_path)  # the child rotates it (loopx.log.rotation)
    try:
        with signals_blocked():
            return subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=dict(env),
                cwd=cwd,
                start_new_session=True,
                close_fds=True,
            )
    finally:
        if not isinstance(out, int):
            out.close()


def fleet_processes(root: Path, *, agent_id: str | None = None) -> list[psutil.Process]:
    """Processes started for this root's fleet: their environment names the root and an agent.

    Agents are spawned with ``LOOPX_ROOT`` and ``LOOPX_AGENT_ID``; their hosts
    inherit both, so a host that ``setsid``-ed or double-forked away from the
    agent's tree is still found. A person's shell that merely exports
    ``LOOPX_ROOT`` carries no agent id and is never touched.
    """
    return find_by_env(str(root), {environ.AGENT_ID: agent_id})


def reap_orphans(known: Iterable[int] = ()) -> list[tuple[int, int]]:
    """Collect exit statuses of zombie children not in ``known`` (orphans adopted as subreaper).

    Returns:
        ``(pid, wait status)`` of each reaped child.

    """
    skip = set(known)
    reaped = []
    try:
        children = psutil.Process().children()
    except psutil.NoSuchProcess:  # pragma: no cover - we are alive
        return []
    for child in children:
        if child.pid in skip:
            continue
        try:
            if child.status() != psutil.STATUS_ZOMBIE:
                continue
            pid, status = os.waitpid(child.pid, os.WNOHANG)
        except (psutil.NoSuchProcess, ChildProcessError):
            continue
        if pid:
            reaped.append((pid, status))
    return reaped
