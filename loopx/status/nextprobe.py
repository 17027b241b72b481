"""Probes: run a goal's read-only ``next_probe`` command and record what it printed.

The observation goes to ``projections/probes/<id>.json`` and from there into
the status projection; the goal's state is never touched. The command runs
through ``sh -c`` in the goal's workdir, in its own session, with
``LOOPX_READ_ONLY=1``, no stdin, bounded output and a deadline after which
its whole process group is killed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import IO, Final

from loopx import environ
from loopx.errors import GoalStateError, UsageError
from loopx.registry.goalrecords import Goal
from loopx.root import Layout
from loopx.secrets import redact_text, secret_values
from loopx.status.sources import write_probe
from loopx.status.view import ProbeObservation

DEFAULT_TIMEOUT_S: Final = 30.0
DEFAULT_MAX_BYTES: Final = 64 * 1024
_CHUNK: Final = 8192


class _BoundedReader(threading.Thread):
    """Reads a pipe to its end, keeping at most ``limit`` bytes, so the child never blocks."""

    def __init__(self, pipe: IO[bytes], limit: int) -> None:
        super().__init__(daemon=True)
        self.pipe, self.limit = pipe, limit
        self.kept = bytearray()
        self.truncated = False

    def run(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            fd = self.pipe.fileno()
            while chunk := os.read(fd, _CHUNK):
                room = self.limit - len(self.kept)
                if room > 0:
                    self.kept += chunk[:room]
                if len(chunk) > max(room, 0):
                    self.truncated = True

    def text(self) -> str:
        return bytes(self.kept).decode(errors="replace")


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def run_probe(
    layout: Layout,
    goal: Goal,
    *,
    now: datetime,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> ProbeObservation:
    """Run the goal's ``next_probe`` and store the observation for the status projection.

    Raises:
        GoalStateError: the goal has no ``next_probe`` or its workdir is missing.
        UsageError: ``timeout_s`` or ``max_bytes`` is not positive.

    """
    if timeout_s <= 0 or max_bytes <= 0:
        raise UsageError(
            "probe timeout and output limit must be positive", hint="see `loopx probe --help`"
        )
    if not goal.next_probe:
        raise GoalStateError(
            f"goal {goal.id!r} has no next_probe command",
            hint=f"set one with `loopx goal add {goal.id} --update --next-probe 'CMD'`",
        )
    workdir = Path(goal.workdir)
    if not workdir.is_dir():
        raise GoalStateError(
            f"goal {goal.id!r}: workdir {workdir} does not exist",
            hint="create it or fix the goal's --workdir",
        )
    env = {
        **os.environ,
        environ.READ_ONLY: "1",
        environ.GOAL_ID: goal.id,
        environ.ROOT: str(layout.root),
    }
    started = time.monotonic()
    proc = subprocess.Popen(
        ["sh", "-c", goal.next_probe],
        cwd=workdir,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    assert proc.stdout is not None  # noqa: S101 - both are PIPE
    assert proc.stderr is not None  # noqa: S101
    readers = [_BoundedReader(proc.stdout, max_bytes), _BoundedReader(proc.stderr, max_bytes)]
    for r in readers:
        r.start()
    timed_out = False
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(proc)
        proc.wait()
    finally:
        # A probe's background children may keep the pipes open; they are
        # part of its session and do not outlive it.
        _kill_group(proc)
        for r in readers:
            r.join(timeout=2.0)
        proc.stdout.close()
        proc.stderr.close()
    out, err = readers
    observation = ProbeObservation(
        goal_id=goal.id,
        command=goal.next_probe,
        cwd=str(workdir),
        exit_code=None if timed_out else proc.returncode,
        timed_out=timed_out,
        # Stored and served by the status server: secret values never go in.
        stdout=redact_text(out.text(), secret_values(env)),
        stderr=redact_text(err.text(), secret_values(env)),
        truncated=out.truncated or err.truncated,
        started_at=now,
        duration_s=round(time.monotonic() - started, 3),
    )
    write_probe(layout, observation)
    return observation
