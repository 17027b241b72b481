"""Run a done-check: a command in a directory, contained like a host, with a timeout.

The check runs through :func:`loopx.agents.hostrun.run_host`, so it has the
host's containment: its own session and process group, the whole tree killed
at the timeout (and whatever it leaves behind swept when it exits), usage
measured with psutil. Only the tail of its output is kept: a test suite's
last lines say why it failed.

This is the one runner of a check: the turn's check step
(:mod:`loopx.turn.steps.checking`, through :mod:`loopx.agents.turn`) and a
merge's check on the merged tree both call :func:`run_done_check`.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable, Mapping
from pathlib import Path

from loopx import environ
from loopx.agents.hostlimits import DEFAULT_KILL_GRACE_S, Limits
from loopx.agents.hostrun import HostRun, run_host
from loopx.donecheck import OUTPUT_TAIL_CHARS, CheckResult
from loopx.turn.failures import FailureReason

# Bytes kept before decoding: a UTF-8 character is at most 4 bytes.
_TAIL_BYTES = OUTPUT_TAIL_CHARS * 4


class _Tail:
    """The last bytes of stdout and stderr together, in the order they were read."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.kept = bytearray()
        self.dropped = 0

    def feed(self, chunk: bytes) -> None:
        self.kept += chunk
        extra = len(self.kept) - self.limit
        if extra > 0:
            del self.kept[:extra]
            self.dropped += extra

    def text(self) -> tuple[str, int]:
        """The tail as text (at most OUTPUT_TAIL_CHARS characters) and the bytes before it."""
        text = self.kept.decode("utf-8", errors="replace")
        cut = max(len(text) - OUTPUT_TAIL_CHARS, 0)
        return text[cut:], self.dropped + len(text[:cut].encode("utf-8", errors="replace"))


def run_done_check(
    argv: list[str],
    *,
    cwd: Path,
    timeout_s: float,
    env: Mapping[str, str],
    loopx_root: str,
    turn_key: str | None = None,
    kill_grace_s: float = DEFAULT_KILL_GRACE_S,
    stop: threading.Event | None = None,
    tick: Callable[[], None] | None = None,
    tick_every_s: float = 10.0,
) -> CheckResult:
    """Run ``argv`` in ``cwd`` to its end or its timeout and say what it gave.

    Args:
        argv: program and arguments; never given to a shell.
        cwd: where it runs (the goal's workdir, or a merge's scratch tree).
        timeout_s: the whole tree is killed past this many seconds (``timed_out``).
        env: the full environment of the check.
        loopx_root: the runtime root; the check's processes carry it
            (``LOOPX_ROOT``) so they can be found and killed if this process dies.
        turn_key: the turn the check belongs to (``LOOPX_TURN_KEY``); a fresh
            key when None (a check outside a turn).
        kill_grace_s: SIGTERM to SIGKILL at the timeout.
        stop: when set, the check is terminated (the result is not ``passed``).
        tick: called every ``tick_every_s`` while it runs (lease renewal);
            if it raises, the tree is killed and the error propagates.
        tick_every_s: the tick period.

    Returns:
        The result; a program that cannot start gives ``spawn_error``, never raises.

    """
    key = turn_key or f"check-{secrets.token_hex(6)}"
    tail = _Tail(_TAIL_BYTES)
    run = run_host(
        argv,
        stdin=b"",
        cwd=cwd,
        env={**env, environ.TURN_KEY: key, environ.ROOT: loopx_root},
        limits=Limits(timeout_s=timeout_s, kill_grace_s=kill_grace_s),
        turn_key=key,
        loopx_root=loopx_root,
        stop=stop,
        tick=tick,
        tick_every_s=tick_every_s,
        tee=tail.feed,
    )
    return _check_result(argv, run, tail)


def _check_result(argv: list[str], run: HostRun, tail: _Tail) -> CheckResult:
    """What the check's run gave, with the tail of its output."""
    text, dropped = tail.text()
    return CheckResult(
        argv=list(argv),
        exit_code=run.exit_code,
        signal=run.signal,
        timed_out=run.killed is FailureReason.TURN_TIMEOUT,
        spawn_error=run.spawn_error,
        output_tail=text,
        output_dropped=dropped,
        usage=run.usage,
        started_at=run.started_at,
        ended_at=run.ended_at,
    )


__all__ = ["run_done_check"]
