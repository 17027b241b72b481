"""The public Python API: everything the CLI does, from Python, with typed results.

``Root.open()`` resolves the runtime root exactly as the CLI does; its groups
(``root.goals``, ``root.gates``, ``root.status``, ``root.quota``,
``root.turns``, ``root.fleet``, ``root.accounts``) and methods (``Root.init``, ``Root.diagnose``,
``Root.demo``, ``Root.schema``, ``root.serve``) return the same models the
matching ``--json`` output prints and raise the same
:class:`loopx.errors.LoopxError` subclasses. ``loopx/cli/`` is one client of
it, and imports nothing else of the package but the errors, the exit codes
and the output models. See docs/api.md.

Like the CLI this is a composition root: it may import the agents and the
supervisor (lazily, so ``import loopx.api`` stays cheap); the kernel never
imports it. The names below are imported on first use (PEP 562), as in
``loopx/__init__.py``: the CLI takes ``configure_logging`` and the agent's
options (``add_agent_run_options``) from here without paying for the groups.
"""

from __future__ import annotations

# Not `from typing import TYPE_CHECKING`: importing typing alone costs milliseconds.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from loopx.agents.options import add_agent_run_options
    from loopx.api._accounts import Accounts
    from loopx.api._demo import Demo
    from loopx.api._fleet import Fleet
    from loopx.api._fleetrun import FleetOptions, SupervisorRunError
    from loopx.api._gates import Gates
    from loopx.api._goals import Goals
    from loopx.api._quota import Quota
    from loopx.api._root import Root
    from loopx.api._serve import StatusServer
    from loopx.api._status import Status
    from loopx.api._turns import Turns
    from loopx.api._warm import (
        print_quota_snapshot,
        print_status_snapshot,
        remember_answer,
        replay_answer,
        warm_call,
    )
    from loopx.log import configure_logging
    from loopx.supervisor.batch import Progress
    from loopx.supervisor.demorun import DemoResult

# Public name -> the module that defines it.
_EXPORTS: dict[str, str] = {
    "Accounts": "loopx.api._accounts",
    "Demo": "loopx.api._demo",
    "DemoResult": "loopx.supervisor.demorun",
    "Fleet": "loopx.api._fleet",
    "FleetOptions": "loopx.api._fleetrun",
    "Gates": "loopx.api._gates",
    "Goals": "loopx.api._goals",
    "Progress": "loopx.supervisor.batch",
    "Quota": "loopx.api._quota",
    "Root": "loopx.api._root",
    "Status": "loopx.api._status",
    "StatusServer": "loopx.api._serve",
    "SupervisorRunError": "loopx.api._fleetrun",
    "Turns": "loopx.api._turns",
    "add_agent_run_options": "loopx.agents.options",  # `loopx agent run` = the agent process
    "configure_logging": "loopx.log",  # structlog as the CLI sets it up
    # The warm answers, standard library only (`quota should-run`, `status --json`).
    "print_quota_snapshot": "loopx.api._warm",
    "print_status_snapshot": "loopx.api._warm",
    "remember_answer": "loopx.api._warm",
    "replay_answer": "loopx.api._warm",
    "warm_call": "loopx.api._warm",
}


def __getattr__(name: str) -> Any:  # noqa: ANN401 - PEP 562 hook: any exported object
    """Import a public name on first access and cache it in the module."""
    if name not in _EXPORTS:
        msg = f"module 'loopx.api' has no attribute {name!r}"
        raise AttributeError(msg)
    import importlib  # noqa: PLC0415 - lazy, see above

    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__all__ = [
    "Accounts",
    "Demo",
    "DemoResult",
    "Fleet",
    "FleetOptions",
    "Gates",
    "Goals",
    "Progress",
    "Quota",
    "Root",
    "Status",
    "StatusServer",
    "SupervisorRunError",
    "Turns",
    "add_agent_run_options",
    "configure_logging",
    "print_quota_snapshot",
    "print_status_snapshot",
    "remember_answer",
    "replay_answer",
    "warm_call",
]
