"""A turn's table with one more row, for the tests of adding a step.

:data:`NOOP` is a step that changes nothing but a log outside the root
(``noop.log`` in the goal's workdir, one turn key a line): it shows a new
row runs, is journaled (``completed_steps``) and gets its fault points,
without touching any other row. ``python -m tests.stepkit ROOT GOAL`` runs
one turn through that table in a process of its own, so a fault point can
kill it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from loopx.agents.turn import AgentProcesses
from loopx.root import Layout, ResolvedRoot, RootSource, open_root
from loopx.turn.attempt import TurnAttempt
from loopx.turn.steps import STEPS, Step, TurnConfig, TurnContext, TurnOptions, take_turn
from loopx.turn.steps.recovering import read_goal
from loopx.turn.steps.table import recorded

NOOP_LOG = "noop.log"


def noop(ctx: TurnContext) -> TurnContext:
    """Note the turn in ``noop.log`` (outside the root); nothing else."""
    with (Path(ctx.goal.workdir) / NOOP_LOG).open("a") as log:
        log.write(f"{ctx.planned.turn_key}\n")
    return ctx


NOOP = Step("noop", noop, done=recorded("noop"))


def with_noop(after: str = "settle") -> tuple[Step, ...]:
    """The table with :data:`NOOP` right after the row ``after``; every other row as it is."""
    at = [s.name for s in STEPS].index(after) + 1
    return (*STEPS[:at], NOOP, *STEPS[at:])


def noop_runs(workdir: Path) -> list[str]:
    """The turn key of every run of the no-op step."""
    path = workdir / NOOP_LOG
    return path.read_text().splitlines() if path.exists() else []


def run_turn(layout: Layout, goal_id: str, steps: tuple[Step, ...]) -> TurnAttempt:
    """One turn of ``goal_id`` through ``steps``, with the agent's process side.

    The agent id is the one `loopx turn run-once` uses, so the files compare with its run.
    """
    config = TurnConfig.from_env(os.environ)
    ctx = TurnContext(
        layout, read_goal(layout, goal_id), "cli", config, TurnOptions(), AgentProcesses(config)
    )
    return take_turn(ctx, steps)


def main(argv: list[str]) -> int:
    """``ROOT GOAL``: one turn through the table with the no-op row; its attempt as JSON."""
    root = Path(argv[0])
    layout = open_root(ResolvedRoot(root, root / "registry.json", RootSource.FLAG), create=False)
    print(run_turn(layout, argv[1], with_noop()).model_dump_json())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
