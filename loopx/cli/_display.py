"""Progress displays for batch runs: a rich progress bar on a TTY, plain periodic lines otherwise."""

from __future__ import annotations

import sys
import time
from types import TracebackType
from typing import TYPE_CHECKING, Self, TextIO

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

if TYPE_CHECKING:
    from loopx.api import Progress as BatchProgress


class PlainDisplay:
    """One line per change, at most every ``every_s`` seconds (CI logs stay short)."""

    def __init__(self, stream: TextIO = sys.stderr, every_s: float = 5.0) -> None:
        self.stream = stream
        self.every_s = every_s
        self._last: tuple[int, ...] | None = None
        self._last_at = 0.0

    def __call__(self, p: BatchProgress) -> None:
        """Print the progress if it changed and the interval passed."""
        key = (p.done, p.needs_human, p.turns, p.failures)
        now = time.monotonic()
        if key == self._last or (now - self._last_at < self.every_s and self._last is not None):
            return
        self._last, self._last_at = key, now
        self.stream.write(
            f"loopx batch: {p.done}/{p.goals} goals done, {p.needs_human} need a human, "
            f"{p.turns} turns, {p.failures} failed turns, {p.elapsed_s:.0f}s\n"
        )
        self.stream.flush()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_exc: object) -> None:
        return None


class RichDisplay:
    """A live progress bar of goals done, with turns and failures beside it."""

    def __init__(self, stream: TextIO = sys.stderr) -> None:
        self._progress = Progress(
            TextColumn("[bold]loopx batch"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn(
                "goals done · {task.fields[turns]} turns · {task.fields[failures]} failed · "
                "{task.fields[human]} need a human"
            ),
            TimeElapsedColumn(),
            console=Console(file=stream),
            transient=False,
        )
        self._task = self._progress.add_task("batch", total=None, turns=0, failures=0, human=0)

    def __call__(self, p: BatchProgress) -> None:
        """Update the bar."""
        self._progress.update(
            self._task,
            total=p.goals,
            completed=p.done,
            turns=p.turns,
            failures=p.failures,
            human=p.needs_human,
        )

    def __enter__(self) -> Self:
        self._progress.start()
        return self

    def __exit__(
        self, _t: type[BaseException] | None, _e: BaseException | None, _tb: TracebackType | None
    ) -> None:
        self._progress.stop()


def display_for(stream: TextIO = sys.stderr) -> PlainDisplay | RichDisplay:
    """A rich bar on a terminal, plain lines otherwise."""
    return RichDisplay(stream) if stream.isatty() else PlainDisplay(stream)
