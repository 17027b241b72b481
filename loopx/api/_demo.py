"""``Root.demo()``: `loopx demo`, four demo goals on a fresh root and a headless fleet until idle."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from loopx.api._status import Status
from loopx.root import Layout, ResolvedRoot, RootSource, open_root

if TYPE_CHECKING:
    from loopx.supervisor.batch import Progress
    from loopx.supervisor.demorun import DemoResult


def _ignore(_progress: Progress) -> None:
    """The default progress display: none."""


@dataclass(frozen=True, slots=True)
class Demo:
    """A demo ready to run: a fresh directory (plan, work directories, report) and its root."""

    home: Path
    layout: Layout

    @classmethod
    def create(cls, path: str | os.PathLike[str] | None = None) -> Demo:
        """A fresh temporary directory, and the root ``path`` (else ``<directory>/root``), created.

        Like `loopx demo`, only ``path`` (``--root``) is used: ``$LOOPX_ROOT``
        is not, so a demo never lands in a real root by accident.
        """
        from loopx.supervisor.demorun import demo_home  # noqa: PLC0415 - heavy

        home, root = demo_home(Path(path).resolve() if path is not None else None)
        resolved = ResolvedRoot(root, root / "registry.json", RootSource.FLAG)
        return cls(home, open_root(resolved, create=True))

    @property
    def root(self) -> Path:
        """The demo's runtime root."""
        return self.layout.root

    @property
    def status(self) -> Status:
        """The demo root's attention queue (as ``root.status``)."""
        return Status(self.layout)

    def run(self, *, agents: int = 2, progress: Callable[[Progress], None] = _ignore) -> DemoResult:
        """Register the demo goals and run a headless fleet of ``agents`` until idle (at most 5 min).

        ``result.report`` is what `loopx demo --json` prints; ``result.as_designed``
        says whether every goal ended as the demo intends (exit 0).

        Raises:
            UsageError: ``agents`` is below 1.
            BatchError: the fleet could not run.
        """
        from loopx.errors import UsageError  # noqa: PLC0415
        from loopx.supervisor.demorun import run_demo  # noqa: PLC0415 - heavy

        if agents < 1:
            raise UsageError(f"--agents must be at least 1, got {agents}", hint="pass --agents N")
        return run_demo(self.layout, self.home, agents=agents, show=progress)

    def next_steps(self, result: DemoResult) -> list[str]:
        """The commands a newcomer should try next, with this demo's paths filled in."""
        from loopx.supervisor.demorun import next_steps  # noqa: PLC0415 - heavy

        return next_steps(result, self.root)
