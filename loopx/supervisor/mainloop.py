"""The supervisor's main loop: tick, then sleep until the next tick is due or a signal comes.

Signal handlers only record intent; the loop wakes on any handled signal (a pipe given to
``signal.set_wakeup_fd``) and the next tick acts on it. Whatever ends the loop, the signal
handlers and the wake-up descriptor are restored, and a fleet that did not stop cleanly is
ended and recorded as failed before the error goes on.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import time
from types import FrameType
from typing import Protocol

from loopx import process


class Ticking(Protocol):
    """What the loop drives (:class:`loopx.supervisor.supervisor.Supervisor`)."""

    def handle_signal(self, signum: int, frame: FrameType | None = None) -> None:
        """Record what a signal asks for."""

    def start(self) -> None:
        """Start before the first tick."""

    def tick(self, now: float) -> int | None:
        """One step; the exit code once stopped."""

    def next_wait(self, now: float) -> float:
        """Seconds the loop may sleep before the next tick is due."""

    def abandon(self) -> None:
        """End and record what runs, after an error that ends the loop."""

    def close(self) -> None:
        """Release what the start took, whatever ended the loop."""


def run_loop(fleet: Ticking) -> int:
    """Start ``fleet``, then tick until it stops; its exit code. Main thread only."""
    read_fd, write_fd = os.pipe()
    os.set_blocking(read_fd, False)
    os.set_blocking(write_fd, False)
    old_wakeup = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    handled = (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD)
    old_handlers = {s: signal.signal(s, fleet.handle_signal) for s in handled}
    old_handlers[signal.SIGINT] = process.own_sigint(fleet.handle_signal)
    # Started by `supervisor start`, we inherit the spawner's blocked mask (see process.spawn).
    process.unblock_handled_signals()
    try:
        fleet.start()
        while True:
            code = fleet.tick(time.monotonic())
            if code is not None:
                return code
            with contextlib.suppress(InterruptedError):
                select.select([read_fd], [], [], fleet.next_wait(time.monotonic()))
            with contextlib.suppress(BlockingIOError):
                while os.read(read_fd, 512):
                    pass
    except BaseException:
        fleet.abandon()
        raise
    finally:
        for signum, handler in old_handlers.items():
            signal.signal(signum, handler)
        signal.set_wakeup_fd(old_wakeup)
        os.close(read_fd)
        os.close(write_fd)
        fleet.close()
