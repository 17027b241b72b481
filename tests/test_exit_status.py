"""The agent's exit status is a type: what ended it, and whether a restart counts as a crash."""

from __future__ import annotations

import signal
import subprocess
import sys

from loopx.fleet import AgentSlot, ExitKind, ExitStatus


def _status_of(code: str) -> ExitStatus:
    proc = subprocess.run([sys.executable, "-c", code], check=False, timeout=30)
    return ExitStatus.of_returncode(proc.returncode)


def test_a_zero_exit_is_clean() -> None:
    """A child that exits 0 by itself is clean: its restart is no crash."""
    status = _status_of("pass")
    assert (status.kind, status.code, status.clean, status.describe()) == (
        ExitKind.EXITED,
        0,
        True,
        "exit code 0",
    )


def test_a_non_zero_exit_is_a_crash() -> None:
    """A child exiting 137 by itself (a fault point) is a crash, reported with its code."""
    status = _status_of("import os; os._exit(137)")
    assert (status.kind, status.code, status.clean) == (ExitKind.EXITED, 137, False)


def test_a_signal_is_named() -> None:
    """A child killed by SIGKILL is reported by the signal's name, and is a crash."""
    status = _status_of("import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
    assert (status.kind, status.signal, status.clean, status.describe()) == (
        ExitKind.SIGNALLED,
        signal.SIGKILL.name,
        False,
        "signal SIGKILL",
    )


def test_a_stall_kill_is_never_clean() -> None:
    """An agent the supervisor killed for a silent heartbeat is a crash, whatever its code."""
    status = ExitStatus(kind=ExitKind.STALLED, detail="heartbeat silent for 61s")
    assert (status.clean, status.describe()) == (False, "stalled: heartbeat silent for 61s")


def test_an_old_text_status_still_reads() -> None:
    """A supervisor.json written when last_exit was text still validates (kind unknown)."""
    slot = AgentSlot.model_validate({"index": 1, "agent_id": "agent-1", "last_exit": "exit code 0"})
    assert slot.last_exit == ExitStatus(kind=ExitKind.UNKNOWN, detail="exit code 0")
