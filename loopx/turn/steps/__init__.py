"""The turn as a table of steps, claim to release (:mod:`loopx.turn.steps.table`)."""

from loopx.turn.steps.context import (
    Stop,
    StopKind,
    TurnConfig,
    TurnContext,
    TurnOptions,
    TurnProcesses,
)
from loopx.turn.steps.table import STEPS, Step, fault_points, run_steps, take_turn

__all__ = [
    # the table
    "STEPS",
    "Step",
    # what its steps share
    "Stop",
    "StopKind",
    "TurnConfig",
    "TurnContext",
    "TurnOptions",
    "TurnProcesses",
    "fault_points",
    "run_steps",
    "take_turn",
]
