"""An agent process's signals: SIGTERM and SIGINT recorded as intent from a watcher thread.

The C-level handler writes the signal number to a wakeup pipe at once, even
while the main thread waits inside a turn; a watcher thread reads it and
calls the agent's handler, which only records the intent (the first stops
at a safe point, the second forces an exit). SIGHUP is ignored.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from types import FrameType


def install_signal_handlers(handle: Callable[[int], None]) -> None:
    """Deliver SIGTERM/SIGINT to ``handle(signum)`` from a watcher thread; ignore SIGHUP."""
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, _noop_handler)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)

    def watch() -> None:
        while True:
            data = os.read(read_fd, 64)
            if not data:
                return
            for signum in data:
                if signum in (signal.SIGTERM, signal.SIGINT):
                    handle(signum)

    threading.Thread(target=watch, name="signal-watcher", daemon=True).start()


def _noop_handler(_signum: int, _frame: FrameType | None) -> None:
    """Installed so the signal is caught (and written to the wakeup fd) instead of killing us."""
