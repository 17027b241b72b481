"""The ``LOOPX_*`` environment variables: every name LoopX sets or reads, and typed readers.

A name is spelled here once; everything else uses the constant. The module
imports nothing but the standard library, so the demo host (which imports
only the standard library) can use it too.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # not `typing`: a warm `quota should-run` must not pay for its import
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Final

PREFIX: Final = "LOOPX_"  # LoopX's own variables: never secrets, forwarded to Ray actors

# Where a process belongs. Every agent and host inherits these, so psutil finds
# them by their environment even after they setsid away from their group.
ROOT: Final = "LOOPX_ROOT"  # the runtime root (also the root resolution's second choice)
AGENT_ID: Final = "LOOPX_AGENT_ID"  # set for every agent the supervisor starts
GOAL_ID: Final = "LOOPX_GOAL_ID"  # set for every host (and probe)
TURN_KEY: Final = "LOOPX_TURN_KEY"  # set for every host
# Set for every host: this one run of it. A retry of the turn (another agent's, after a
# takeover) has the same turn key, and the run it replaced must not kill it by that key.
HOST_RUN: Final = "LOOPX_HOST_RUN"

# What a host (or probe) is told.
WORKDIR: Final = "LOOPX_WORKDIR"
RESULT_FILE: Final = "LOOPX_RESULT_FILE"  # where the host writes its result JSON
READ_ONLY: Final = "LOOPX_READ_ONLY"  # "1" for a probe
# An account's provider endpoint: a sandboxed host's proxy forwards its model requests there
# (docs/sandbox.md); inside the sandbox it names the bridge.
PROVIDER_URL: Final = "LOOPX_PROVIDER_URL"

# Tuning, read by agents (see loopx.agents.turn.TurnConfig) and the lock factory.
LEASE_TTL_S: Final = "LOOPX_LEASE_TTL_S"
LEASE_GRACE_S: Final = "LOOPX_LEASE_GRACE_S"
KILL_GRACE_S: Final = "LOOPX_KILL_GRACE_S"
LOCK_MODE: Final = "LOOPX_LOCK_MODE"  # flock | soft | auto
SOFT_LOCK_STALE_S: Final = "LOOPX_SOFT_LOCK_STALE_S"

# The HTTP status server's bearer token.
SERVE_TOKEN: Final = "LOOPX_SERVE_TOKEN"  # noqa: S105 - the variable's name, not a token

# Log files (loopx.log.rotation): the file this process's stdout and stderr write to, which it
# rotates by size; the size (bytes, default 10 MiB) is for tests and small disks.
LOG_FILE: Final = "LOOPX_LOG_FILE"
LOG_MAX_BYTES: Final = "LOOPX_LOG_MAX_BYTES"

# Tests and demos.
FAULT: Final = "LOOPX_FAULT"  # fault points to die at (see loopx.faults); never passed to a host
DEMO_ARGS: Final = "LOOPX_DEMO_ARGS"  # extra switches of the demo host


def text(name: str, env: Mapping[str, str] = os.environ) -> str | None:
    """The variable's value, or None when it is unset or empty."""
    return env.get(name) or None


def seconds(name: str, default: float, env: Mapping[str, str] = os.environ) -> float:
    """A duration in seconds from the variable, ``default`` when it is unset or empty.

    Raises:
        EnvironmentValueError: the value is not a number.

    """
    value = text(name, env)
    if value is None:
        return default
    try:
        return float(value)
    except ValueError as e:
        from loopx.errors import EnvironmentValueError  # noqa: PLC0415 - keep this module stdlib-only

        raise EnvironmentValueError(name, value, "a number of seconds") from e


def loopx_items(env: Mapping[str, str] = os.environ) -> dict[str, str]:
    """Every ``LOOPX_*`` variable of ``env``."""
    return {k: v for k, v in env.items() if k.startswith(PREFIX)}


def without(names: tuple[str, ...], env: Mapping[str, str] = os.environ) -> dict[str, str]:
    """A copy of ``env`` without ``names``."""
    return {k: v for k, v in env.items() if k not in names}
