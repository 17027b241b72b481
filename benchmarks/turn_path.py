"""The path a goal's id takes through the code in one turn, claim to release, as it runs.

    /work/venv/bin/python benchmarks/turn_path.py [--list]

One whole turn in-process (``run_one_turn``, a ``/bin/echo`` command host), traced
with :func:`sys.setprofile` in the calling thread: every call of a ``loopx``
function that receives the goal is a **stop**: an argument that is the goal's id,
its :class:`~loopx.registry.goalrecords.Goal`, or the turn's context that holds it. Consecutive stops in one module are one **stay**; the figures:

* stops, stays, and the **modules** (files) and **packages** they are in;
* **climbs**: moves from one stay to the next whose package stands higher in
  the layers (``tests/test_architecture.py``: the kernel's order, then the
  agents and the supervisor, then the API), a return to a caller included.

The turn is traced after three untraced turns of the same goal, so what runs
once per process (imports, the first checks of a directory) is not counted.
``--list`` prints the stays in order. Nothing is timed: the figures are counts,
the same on a busy machine as on a quiet one.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
import types
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from _echoroot import echo_root  # noqa: E402

from loopx.agents.turn import TurnConfig, run_one_turn  # noqa: E402
from loopx.log import configure_logging  # noqa: E402
from loopx.registry.goalrecords import Goal  # noqa: E402
from loopx.turn.steps.context import TurnContext  # noqa: E402
from tests.test_architecture import KERNEL_ORDER, LAYERS, kernel_unit, layer_of  # noqa: E402

GOAL = "pathgoal"
PACKAGE_DIR = str(REPO / "loopx")
# Above the kernel, bottom to top; a layer not named here ranks with the API.
OUTER: tuple[str, ...] = ("agents", "supervisor", "web", "api", "cli")


def rank(module: str) -> int:
    """How high ``module``'s package stands: the kernel's order, then the outer layers."""
    layer = layer_of(module)
    if layer == "kernel":
        unit = kernel_unit(module)
        return KERNEL_ORDER.index(unit) if unit in KERNEL_ORDER else -1
    outer = OUTER.index(layer) if layer in OUTER else OUTER.index("api")
    return len(KERNEL_ORDER) + outer


def package(module: str) -> str:
    """The unit ``rank`` ranks: a kernel package (or ``turn.steps``), or an outer layer."""
    if layer_of(module) in LAYERS or layer_of(module) in OUTER:
        return f"loopx.{layer_of(module)}"
    return f"loopx.{kernel_unit(module) or ''}".rstrip(".")


def holds_goal(value: object) -> bool:
    """Whether a call's argument is the goal's id, or the goal or turn context that holds it."""
    if isinstance(value, str):
        return value == GOAL
    return isinstance(value, Goal | TurnContext)


@dataclass
class Trace:
    """The stops of one turn, in the order they were called."""

    stops: list[tuple[str, str]] = field(default_factory=list)  # (module, function)

    def profile(self, frame: types.FrameType, event: str, _arg: object) -> None:
        if event != "call" or not frame.f_code.co_filename.startswith(PACKAGE_DIR):
            return
        code = frame.f_code
        count = code.co_argcount + code.co_kwonlyargcount
        names = code.co_varnames[:count]
        values = frame.f_locals
        if any(holds_goal(values.get(name)) for name in names):
            self.stops.append((frame.f_globals.get("__name__", "?"), code.co_qualname))

    def stays(self) -> list[tuple[str, list[str]]]:
        """Consecutive stops in one module, merged."""
        found: list[tuple[str, list[str]]] = []
        for module, function in self.stops:
            if found and found[-1][0] == module:
                found[-1][1].append(function)
            else:
                found.append((module, [function]))
        return found


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--list", action="store_true", help="print the stays in order")
    args = parser.parse_args()
    configure_logging(level="warning")
    layout = echo_root(
        Path(tempfile.mkdtemp(prefix="loopx-path-")), GOAL, objective="trace one turn"
    )
    config = TurnConfig()
    for _ in range(3):
        run_one_turn(layout, GOAL, agent_id="path", config=config)
    trace = Trace()
    sys.setprofile(trace.profile)
    try:
        report = run_one_turn(layout, GOAL, agent_id="path", config=config)
    finally:
        sys.setprofile(None)
    assert report is not None and report.status == "committed", report
    stays = trace.stays()
    climbs = sum(rank(b[0]) > rank(a[0]) for a, b in itertools.pairwise(stays))
    modules = {module for module, _ in trace.stops}
    packages = {package(module) for module in modules}
    if args.list:
        for module, functions in stays:
            print(f"{rank(module):3d}  {module:40s} {', '.join(dict.fromkeys(functions))}")
    print(f"one turn of a command host, claim to release ({layout.root})")
    print(f"stops (calls that receive the goal): {len(trace.stops)}")
    print(f"stays (consecutive stops in one module): {len(stays)}")
    print(f"modules: {len(modules)}   packages: {len(packages)}")
    print(f"climbs (a stay in a higher package than the one before): {climbs}")


if __name__ == "__main__":
    main()
