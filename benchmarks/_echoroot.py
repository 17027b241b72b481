"""A root with one goal whose command host is ``/bin/echo`` printing a progress result.

The in-process turn benchmarks share it (``from _echoroot import echo_root``): the
trivial host leaves the turn's own work, not the host's, to be measured.
"""

from __future__ import annotations

from pathlib import Path

from loopx.model import utcnow
from loopx.registry.goalrecords import HostKind, HostSpec
from loopx.registry.goals import GoalChanges, add_goal
from loopx.root import Layout, ResolvedRoot, RootSource, open_root

HOST = ["/bin/echo", '{"schema_version": 1, "kind": "progress", "summary": "ok"}']


def echo_root(base: Path, goal_id: str, *, objective: str) -> Layout:
    """``base/root`` with the goal ``goal_id``, working in ``base/wd``."""
    layout = open_root(
        ResolvedRoot(base / "root", base / "root/registry.json", RootSource.FLAG), create=True
    )
    (base / "wd").mkdir()
    add_goal(
        layout,
        goal_id,
        GoalChanges(
            objective=objective,
            workdir=str(base / "wd"),
            host=HostSpec(kind=HostKind.COMMAND, argv=HOST),
        ),
        update=False,
        default_workdir=base / "wd",
        now=utcnow(),
    )
    return layout
