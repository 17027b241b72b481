"""LoopX: a supervisor for long-running AI agent work, crash-safe by journal.

The kernel (this package) decides and persists. ``loopx.supervisor`` and
``loopx.agents`` run processes and import the kernel, never the reverse.

The public names below are imported on first use (PEP 562 ``__getattr__``):
``import loopx`` alone costs nothing, so a process that only needs a
submodule (the demo host ``python -m loopx.agents.demo`` imports nothing but
the standard library) does not pay for pydantic and the kernel at start-up.
``from loopx import Goal`` works as before.
"""

# `__all__` names the API's classes, which only `from loopx.api import *` defines for a checker:
# ruff: noqa: F405

from __future__ import annotations

# Not `from typing import TYPE_CHECKING`: importing typing alone costs milliseconds.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    # The Python API: the names of ``__all__`` below that ``loopx.api`` defines.
    from loopx.api import *  # noqa: F403
    from loopx.batch.report import BatchReport, RunSummary
    from loopx.doctor import DoctorReport
    from loopx.errors import (
        CorruptFileError,
        GoalExistsError,
        GoalNotFoundError,
        GoalStateError,
        InvalidGoalIdError,
        InvalidPolicyError,
        LockTimeoutError,
        LoopxError,
        RootError,
        UnsafePathError,
        UsageError,
    )
    from loopx.fleet import ScaleResult, SupervisorStarted, SupervisorStatus, SupervisorStopped
    from loopx.ids import validate_goal_id
    from loopx.quota.decision import QuotaDecision
    from loopx.quota.quotareport import QuotaReport
    from loopx.registry.bulk import ImportReport
    from loopx.registry.goalrecords import Goal, GoalStatus, HostKind, HostSpec, Registry
    from loopx.registry.initialise import InitReport
    from loopx.registry.plan import BatchPlan
    from loopx.registry.quota_policy import QuotaPolicy
    from loopx.registry.views import GateDocument, GoalDocument, GoalList, GoalView, SessionReset
    from loopx.retention.archive import ArchiveResult
    from loopx.root import Layout, ResolvedRoot, open_root, resolve_root
    from loopx.state import Gate, GoalState, Todo
    from loopx.status.refresh import RefreshReport
    from loopx.status.view import Actor, ProbeObservation, StatusProjection
    from loopx.turn.attempt import TurnAttempt, TurnReport
    from loopx.turn.inspection import JournalInspection, JournalList
    from loopx.turn.recovery import RecoveryReport
    from loopx.turn.replay import ReplayReport

    __version__: str

# Public name -> the module that defines it; the rest of ``__all__`` is ``loopx.api``'s
# (one list of the API's names: its own ``__all__``; tests/test_architecture.py checks).
_EXPORTS: dict[str, str] = {
    **dict.fromkeys(
        (
            "CorruptFileError",
            "GoalExistsError",
            "GoalNotFoundError",
            "GoalStateError",
            "InvalidGoalIdError",
            "InvalidPolicyError",
            "LockTimeoutError",
            "LoopxError",
            "RootError",
            "UnsafePathError",
            "UsageError",
        ),
        "loopx.errors",
    ),
    "validate_goal_id": "loopx.ids",
    **dict.fromkeys(
        ("Goal", "GoalStatus", "HostKind", "HostSpec", "Registry"),
        "loopx.registry.goalrecords",
    ),
    "QuotaPolicy": "loopx.registry.quota_policy",
    **dict.fromkeys(("Layout", "ResolvedRoot", "open_root", "resolve_root"), "loopx.root"),
    **dict.fromkeys(("Gate", "GoalState", "Todo"), "loopx.state"),
    # the documents the Python API returns (the `--json` outputs)
    "BatchPlan": "loopx.registry.plan",
    **dict.fromkeys(("BatchReport", "RunSummary"), "loopx.batch.report"),
    **dict.fromkeys(
        ("ScaleResult", "SupervisorStarted", "SupervisorStatus", "SupervisorStopped"),
        "loopx.fleet",
    ),
    "QuotaDecision": "loopx.quota.decision",
    "QuotaReport": "loopx.quota.quotareport",
    "ArchiveResult": "loopx.retention.archive",
    "ImportReport": "loopx.registry.bulk",
    "DoctorReport": "loopx.doctor",
    "InitReport": "loopx.registry.initialise",
    **dict.fromkeys(
        ("GateDocument", "GoalDocument", "GoalList", "GoalView", "SessionReset"),
        "loopx.registry.views",
    ),
    "RefreshReport": "loopx.status.refresh",
    **dict.fromkeys(("Actor", "ProbeObservation", "StatusProjection"), "loopx.status.view"),
    **dict.fromkeys(("TurnAttempt", "TurnReport"), "loopx.turn.attempt"),
    **dict.fromkeys(("JournalInspection", "JournalList"), "loopx.turn.inspection"),
    "RecoveryReport": "loopx.turn.recovery",
    "ReplayReport": "loopx.turn.replay",
}


def _read_version() -> str:
    from loopx._version import VERSION  # noqa: PLC0415 - lazy, see above

    return VERSION


def __getattr__(name: str) -> Any:  # noqa: ANN401 - PEP 562 hook: any exported object
    """Import a public name on first access and cache it in the module."""
    if name == "__version__":
        value: Any = _read_version()
    elif name in _EXPORTS or name in __all__:
        import importlib  # noqa: PLC0415 - lazy, see above

        value = getattr(importlib.import_module(_EXPORTS.get(name, "loopx.api")), name)
    else:
        msg = f"module 'loopx' has no attribute {name!r}"
        raise AttributeError(msg)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__all__ = [
    "Accounts",
    "Actor",
    "ArchiveResult",
    "BatchPlan",
    "BatchReport",
    "CorruptFileError",
    "Demo",
    "DemoResult",
    "DoctorReport",
    "Fleet",
    "FleetOptions",
    "Gate",
    "GateDocument",
    "Gates",
    "Goal",
    "GoalDocument",
    "GoalExistsError",
    "GoalList",
    "GoalNotFoundError",
    "GoalState",
    "GoalStateError",
    "GoalStatus",
    "GoalView",
    "Goals",
    "HostKind",
    "HostSpec",
    "ImportReport",
    "InitReport",
    "InvalidGoalIdError",
    "InvalidPolicyError",
    "JournalInspection",
    "JournalList",
    "Layout",
    "LockTimeoutError",
    "LoopxError",
    "ProbeObservation",
    "Progress",
    "Quota",
    "QuotaDecision",
    "QuotaPolicy",
    "QuotaReport",
    "RecoveryReport",
    "RefreshReport",
    "Registry",
    "ReplayReport",
    "ResolvedRoot",
    "Root",
    "RootError",
    "RunSummary",
    "ScaleResult",
    "SessionReset",
    "Status",
    "StatusProjection",
    "StatusServer",
    "SupervisorRunError",
    "SupervisorStarted",
    "SupervisorStatus",
    "SupervisorStopped",
    "Todo",
    "TurnAttempt",
    "TurnReport",
    "Turns",
    "UnsafePathError",
    "UsageError",
    "__version__",
    "open_root",
    "resolve_root",
    "validate_goal_id",
]
