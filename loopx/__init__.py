"""LoopX: a supervisor for long-running AI agent work, crash-safe by journal.

The kernel (this package) decides and persists. ``loopx.supervisor`` and
``loopx.agents`` run processes and import the kernel, never the reverse.
"""

from importlib.metadata import PackageNotFoundError, version

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
from loopx.ids import validate_goal_id
from loopx.registry import Goal, GoalStatus, HostKind, HostSpec, QuotaPolicy, Registry
from loopx.root import Layout, ResolvedRoot, open_root, resolve_root
from loopx.state import Gate, GoalState, Todo

try:
    __version__ = version("loopx")
except PackageNotFoundError:  # running from a source tree without installing
    __version__ = "0.0.0+unknown"

__all__ = [
    # errors
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
    # the root
    "Layout",
    "ResolvedRoot",
    "open_root",
    "resolve_root",
    "validate_goal_id",
    # models
    "Gate",
    "Goal",
    "GoalState",
    "GoalStatus",
    "HostKind",
    "HostSpec",
    "QuotaPolicy",
    "Registry",
    "Todo",
    "__version__",
]
